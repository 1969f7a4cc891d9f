//! Physics of a simulated handset: a two-node RC thermal network (die and skin), a power
//! model over an OPP table (P_dyn ∝ f·V²), the vendor's own trip-point throttling (in the
//! manner of the Linux `step_wise` governor capping cpufreq), a battery, and a decode
//! throughput model.
//!
//! Every parameter and its provenance is documented in `docs/TELEMETRY.md` ("Simulated
//! handsets").
//! The thermal update is the exact zero-order-hold discretization of the linear RC network, so
//! any step length is stable; `step` still splits long steps at the vendor's polling instants
//! so that the vendor throttle reacts at its own cadence.
//!
//! Conventions: a *frequency level* indexes the OPP table, `0` = slowest OPP,
//! `opps.len() - 1` = fastest. The vendor cap is the highest frequency level allowed.

use serde::Serialize;

/// One operating performance point: a frequency and the voltage the SoC needs for it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Opp {
    pub freq_khz: u32,
    pub voltage_mv: u32,
}

/// Which node of the thermal network a vendor trip point watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TripSensor {
    Die,
    Skin,
}

/// A vendor passive trip point: at or above `temp_c` the vendor lowers its frequency cap one
/// level per poll, down to `floor_level`; it holds inside the hysteresis band and releases one
/// level per poll once the temperature falls below `temp_c - hyst_c`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TripPoint {
    pub sensor: TripSensor,
    pub temp_c: f64,
    pub hyst_c: f64,
    pub floor_level: usize,
}

/// All parameters of one simulated handset.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandsetProfile {
    pub name: &'static str,
    /// Heat capacity of the SoC die and its spreader, J/K.
    pub c_die_j_per_k: f64,
    /// Thermal resistance die → skin, K/W.
    pub r_die_skin_k_per_w: f64,
    /// Heat capacity of the chassis/skin, J/K.
    pub c_skin_j_per_k: f64,
    /// Thermal resistance skin → ambient air, K/W.
    pub r_skin_amb_k_per_w: f64,
    /// Ambient temperature, °C.
    pub ambient_c: f64,
    /// Platform power with the workload idle (display off, radios idle), W.
    pub idle_w: f64,
    /// Dynamic CPU power at the fastest OPP and 100 % busy, W.
    pub dyn_w_at_max: f64,
    /// Memory/interconnect power at the fastest OPP and 100 % busy, W (scales with f·busy).
    pub mem_w_at_max: f64,
    /// OPP table, slowest first.
    pub opps: Vec<Opp>,
    /// Vendor trip points.
    pub trips: Vec<TripPoint>,
    /// Vendor thermal polling period, s.
    pub vendor_poll_s: f64,
    /// Decode speed at the fastest OPP and 100 % busy, tokens/s.
    pub base_tokens_per_s: f64,
    /// Battery capacity, mAh.
    pub battery_mah: f64,
    /// Battery internal resistance, Ω.
    pub battery_r_ohm: f64,
    /// State of charge at power-on, 0..1.
    pub battery_soc0: f64,
}

/// Names accepted by [`profile`].
pub fn profile_names() -> &'static [&'static str] {
    &["snapdragon-8gen3", "pixel-8-pro"]
}

/// The built-in profile called `name`, if any.
pub fn profile(name: &str) -> Option<HandsetProfile> {
    match name {
        "snapdragon-8gen3" => Some(HandsetProfile {
            name: "snapdragon-8gen3",
            c_die_j_per_k: 3.0,
            r_die_skin_k_per_w: 6.0,
            c_skin_j_per_k: 190.0,
            r_skin_amb_k_per_w: 4.0,
            ambient_c: 25.0,
            idle_w: 0.8,
            dyn_w_at_max: 7.2,
            mem_w_at_max: 0.6,
            opps: opps(&[
                (441_600, 560),
                (768_000, 580),
                (1_113_600, 610),
                (1_478_400, 650),
                (1_843_200, 700),
                (2_188_800, 760),
                (2_534_400, 830),
                (2_841_600, 900),
                (3_148_800, 980),
                (3_302_400, 1030),
            ]),
            trips: vec![
                TripPoint {
                    sensor: TripSensor::Die,
                    temp_c: 85.0,
                    hyst_c: 5.0,
                    floor_level: 4,
                },
                TripPoint {
                    sensor: TripSensor::Skin,
                    temp_c: 46.0,
                    hyst_c: 2.0,
                    floor_level: 2,
                },
                TripPoint {
                    sensor: TripSensor::Die,
                    temp_c: 100.0,
                    hyst_c: 5.0,
                    floor_level: 0,
                },
            ],
            vendor_poll_s: 0.5,
            base_tokens_per_s: 22.0,
            battery_mah: 5000.0,
            battery_r_ohm: 0.08,
            battery_soc0: 0.8,
        }),
        "pixel-8-pro" => Some(HandsetProfile {
            name: "pixel-8-pro",
            c_die_j_per_k: 2.6,
            r_die_skin_k_per_w: 6.5,
            c_skin_j_per_k: 170.0,
            r_skin_amb_k_per_w: 4.4,
            ambient_c: 25.0,
            idle_w: 0.9,
            dyn_w_at_max: 6.5,
            mem_w_at_max: 0.5,
            opps: opps(&[
                (324_000, 550),
                (610_000, 575),
                (955_000, 600),
                (1_197_000, 630),
                (1_491_000, 670),
                (1_836_000, 720),
                (2_147_000, 780),
                (2_500_000, 850),
                (2_802_000, 930),
                (2_910_000, 960),
            ]),
            trips: vec![
                TripPoint {
                    sensor: TripSensor::Die,
                    temp_c: 80.0,
                    hyst_c: 4.0,
                    floor_level: 3,
                },
                TripPoint {
                    sensor: TripSensor::Skin,
                    temp_c: 44.0,
                    hyst_c: 2.0,
                    floor_level: 2,
                },
                TripPoint {
                    sensor: TripSensor::Die,
                    temp_c: 95.0,
                    hyst_c: 5.0,
                    floor_level: 0,
                },
            ],
            vendor_poll_s: 1.0,
            base_tokens_per_s: 17.0,
            battery_mah: 5050.0,
            battery_r_ohm: 0.09,
            battery_soc0: 0.8,
        }),
        _ => None,
    }
}

fn opps(table: &[(u32, u32)]) -> Vec<Opp> {
    table
        .iter()
        .map(|&(freq_khz, voltage_mv)| Opp {
            freq_khz,
            voltage_mv,
        })
        .collect()
}

impl HandsetProfile {
    /// The same handset with `k` times less heat capacity (die and skin) and a vendor poll
    /// `k` times shorter: every thermal time constant is divided by `k` while the resistances,
    /// and so every steady temperature, power and energy per second, stay as they are. A
    /// closed loop of the real runtime with this handset settles in minutes instead of tens of
    /// minutes (`--device sim:PROFILE,thermal-speedup=K`, docs/GOVERNOR.md).
    pub fn with_thermal_speedup(mut self, k: f64) -> Self {
        self.c_die_j_per_k /= k;
        self.c_skin_j_per_k /= k;
        self.vendor_poll_s /= k;
        self
    }

    /// Index of the fastest OPP.
    pub fn max_level(&self) -> usize {
        self.opps.len().saturating_sub(1)
    }

    fn fv2(&self, level: usize) -> f64 {
        let o = self.opps[level.min(self.max_level())];
        f64::from(o.freq_khz) * (f64::from(o.voltage_mv) / 1000.0).powi(2)
    }

    /// Frequency at `level` relative to the fastest OPP (0..1].
    pub fn freq_ratio(&self, level: usize) -> f64 {
        let top = self.opps[self.max_level()].freq_khz;
        f64::from(self.opps[level.min(self.max_level())].freq_khz) / f64::from(top)
    }

    /// Workload power (dynamic CPU + memory) at `level` and 100 % busy, W.
    pub fn active_w(&self, level: usize) -> f64 {
        let dyn_w = self.dyn_w_at_max * self.fv2(level) / self.fv2(self.max_level());
        dyn_w + self.mem_w_at_max * self.freq_ratio(level)
    }

    /// Total platform power at `level` and busy fraction `busy` (clamped to 0..1), W.
    pub fn power_w(&self, level: usize, busy: f64) -> f64 {
        self.idle_w + busy.clamp(0.0, 1.0) * self.active_w(level)
    }

    /// Decode throughput, tokens/s. Assumption: decode is compute-bound on this class of
    /// model, so speed scales with the CPU frequency and with the fraction of time busy.
    pub fn tokens_per_s(&self, level: usize, busy: f64) -> f64 {
        self.base_tokens_per_s * self.freq_ratio(level) * busy.clamp(0.0, 1.0)
    }

    /// Total power that holds the skin at `skin_c` in steady state: (T − T_amb) / R_skin→amb.
    pub fn sustainable_power_w(&self, skin_c: f64) -> f64 {
        ((skin_c - self.ambient_c) / self.r_skin_amb_k_per_w).max(0.0)
    }

    /// Power at the fastest OPP with the workload 100 % busy, W.
    pub fn max_power_w(&self) -> f64 {
        self.power_w(self.max_level(), 1.0)
    }

    /// The highest decode throughput any steady mix of OPPs and duty cycle can sustain with
    /// the skin held at `skin_c`: the upper concave envelope of the points
    /// (power, tokens/s) = (idle, 0) and (power_w(L, 1), tokens_per_s(L, 1)) for every OPP,
    /// evaluated at the sustainable power. Time-sharing two operating points (or running one
    /// OPP part-time) moves along the chord between them, so the envelope is the optimum.
    pub fn sustainable_tokens_per_s(&self, skin_c: f64) -> f64 {
        let p_star = self.sustainable_power_w(skin_c);
        let mut pts: Vec<(f64, f64)> = vec![(self.idle_w, 0.0)];
        pts.extend((0..self.opps.len()).map(|l| (self.power_w(l, 1.0), self.tokens_per_s(l, 1.0))));
        if p_star <= self.idle_w {
            return 0.0;
        }
        let mut best: f64 = 0.0;
        for (i, &(pa, ta)) in pts.iter().enumerate() {
            if pa <= p_star {
                best = best.max(ta);
            }
            for &(pb, tb) in &pts[i + 1..] {
                let (lo, hi) = if pa <= pb {
                    ((pa, ta), (pb, tb))
                } else {
                    ((pb, tb), (pa, ta))
                };
                if lo.0 <= p_star && p_star <= hi.0 && hi.0 > lo.0 {
                    let x = (p_star - lo.0) / (hi.0 - lo.0);
                    best = best.max(lo.1 + x * (hi.1 - lo.1));
                }
            }
        }
        best
    }
}

/// What the workload asks of the handset for the next step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Activity {
    /// Fraction of time the decode loop is running (0..1); the rest is idle.
    pub busy: f64,
    /// Requested frequency level (OPP index); the vendor cap may lower it.
    pub freq_level: usize,
}

/// State after one [`HandsetModel::step`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepOutput {
    /// Simulated time since power-on, s.
    pub t_s: f64,
    /// Frequency level actually run (requested, capped by the vendor).
    pub freq_level: usize,
    pub freq_khz: u32,
    /// Highest frequency level the vendor allowed at the end of the step.
    pub vendor_cap_level: usize,
    /// Whether any vendor trip point is engaged.
    pub vendor_throttling: bool,
    pub busy: f64,
    /// Mean power over the step, W.
    pub power_w: f64,
    pub die_c: f64,
    pub skin_c: f64,
    /// Ground-truth energy since power-on, J.
    pub energy_j: f64,
    /// Mean decode throughput over the step, tokens/s.
    pub tokens_per_s: f64,
    /// Tokens decoded since power-on.
    pub tokens: f64,
    pub battery_v: f64,
    /// Battery discharge current (positive = discharging), A.
    pub battery_a: f64,
    /// Charge drawn since power-on, C.
    pub charge_drawn_c: f64,
}

/// A handset in simulated time.
#[derive(Debug, Clone)]
pub struct HandsetModel {
    p: HandsetProfile,
    t_s: f64,
    die_c: f64,
    skin_c: f64,
    energy_j: f64,
    tokens: f64,
    charge_c: f64,
    cap_level: usize,
    latched: Vec<bool>,
    next_poll_s: f64,
    last_level: usize,
    last_power_w: f64,
    last_busy: f64,
    battery_a: f64,
}

impl HandsetModel {
    /// A handset at thermal equilibrium with the ambient, uncapped, idle.
    pub fn new(profile: HandsetProfile) -> Self {
        let n_trips = profile.trips.len();
        let amb = profile.ambient_c;
        let top = profile.max_level();
        let idle = profile.idle_w;
        let poll = profile.vendor_poll_s;
        let mut m = Self {
            p: profile,
            t_s: 0.0,
            die_c: amb,
            skin_c: amb,
            energy_j: 0.0,
            tokens: 0.0,
            charge_c: 0.0,
            cap_level: top,
            latched: vec![false; n_trips],
            next_poll_s: poll,
            last_level: top,
            last_power_w: idle,
            last_busy: 0.0,
            battery_a: 0.0,
        };
        m.battery_a = m.current_for(idle);
        m
    }

    pub fn profile(&self) -> &HandsetProfile {
        &self.p
    }
    pub fn time_s(&self) -> f64 {
        self.t_s
    }
    pub fn die_c(&self) -> f64 {
        self.die_c
    }
    pub fn skin_c(&self) -> f64 {
        self.skin_c
    }
    pub fn energy_j(&self) -> f64 {
        self.energy_j
    }
    pub fn tokens(&self) -> f64 {
        self.tokens
    }
    /// Highest frequency level the vendor currently allows.
    pub fn vendor_cap_level(&self) -> usize {
        self.cap_level
    }
    /// Whether any vendor trip point is engaged.
    pub fn vendor_throttling(&self) -> bool {
        self.latched.iter().any(|&l| l)
    }
    /// Frequency level run during the last step.
    pub fn freq_level(&self) -> usize {
        self.last_level
    }
    pub fn freq_khz(&self) -> u32 {
        self.p.opps[self.last_level].freq_khz
    }
    pub fn busy(&self) -> f64 {
        self.last_busy
    }
    /// Power during the last step, W.
    pub fn power_w(&self) -> f64 {
        self.last_power_w
    }
    /// Battery state of charge, 0..1.
    pub fn battery_soc(&self) -> f64 {
        let cap_c = self.p.battery_mah * 3.6;
        (self.p.battery_soc0 - self.charge_c / cap_c).clamp(0.0, 1.0)
    }
    /// Open-circuit voltage: linear 3.5 V (empty) … 4.2 V (full), 3.85 V at half charge.
    pub fn battery_ocv(&self) -> f64 {
        3.5 + 0.7 * self.battery_soc()
    }
    /// Battery discharge current, A.
    pub fn battery_a(&self) -> f64 {
        self.battery_a
    }
    /// Terminal voltage under the present load (OCV minus the I·R sag), V.
    pub fn battery_v(&self) -> f64 {
        self.battery_ocv() - self.battery_a * self.p.battery_r_ohm
    }
    /// Charge drawn since power-on, C (µAh = C / 3.6e-3).
    pub fn charge_drawn_c(&self) -> f64 {
        self.charge_c
    }

    /// Current that delivers `power_w` at the terminals: P = (OCV − I·R)·I, smaller root.
    fn current_for(&self, power_w: f64) -> f64 {
        let ocv = self.battery_ocv();
        let r = self.p.battery_r_ohm;
        let disc = ocv * ocv - 4.0 * r * power_w;
        if r <= 0.0 || disc <= 0.0 {
            // Beyond the battery's maximum power point: report the current at that point.
            return if r > 0.0 {
                ocv / (2.0 * r)
            } else {
                power_w / ocv
            };
        }
        (ocv - disc.sqrt()) / (2.0 * r)
    }

    /// Advance `dt_s` seconds with the given activity held constant. A non-finite or
    /// non-positive `dt_s` advances nothing and reports the present state.
    pub fn step(&mut self, dt_s: f64, activity: Activity) -> StepOutput {
        let busy = if activity.busy.is_finite() {
            activity.busy.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let requested = activity.freq_level.min(self.p.max_level());
        let mut left = if dt_s.is_finite() && dt_s > 0.0 {
            dt_s
        } else {
            0.0
        };
        let e0 = self.energy_j;
        let tok0 = self.tokens;
        let mut level = requested.min(self.cap_level);
        while left > 0.0 {
            let to_poll = (self.next_poll_s - self.t_s).max(0.0);
            let h = left.min(to_poll.max(1e-9));
            level = requested.min(self.cap_level);
            let p = self.p.power_w(level, busy);
            self.advance_thermal(h, p);
            self.energy_j += p * h;
            self.tokens += self.p.tokens_per_s(level, busy) * h;
            self.battery_a = self.current_for(p);
            self.charge_c += self.battery_a * h;
            self.last_power_w = p;
            self.t_s += h;
            left -= h;
            if self.t_s >= self.next_poll_s - 1e-9 {
                self.vendor_poll();
                self.next_poll_s += self.p.vendor_poll_s;
            }
        }
        self.last_level = level;
        self.last_busy = busy;
        // Terminal readings describe the end of the step: the current that delivers the
        // present power at the present (slightly lower) open-circuit voltage.
        if left == 0.0 && dt_s.is_finite() && dt_s > 0.0 {
            self.battery_a = self.current_for(self.last_power_w);
        }
        let (power_w, tps) = if dt_s.is_finite() && dt_s > 0.0 {
            ((self.energy_j - e0) / dt_s, (self.tokens - tok0) / dt_s)
        } else {
            (self.last_power_w, 0.0)
        };
        StepOutput {
            t_s: self.t_s,
            freq_level: level,
            freq_khz: self.p.opps[level].freq_khz,
            vendor_cap_level: self.cap_level,
            vendor_throttling: self.vendor_throttling(),
            busy,
            power_w,
            die_c: self.die_c,
            skin_c: self.skin_c,
            energy_j: self.energy_j,
            tokens_per_s: tps,
            tokens: self.tokens,
            battery_v: self.battery_v(),
            battery_a: self.battery_a,
            charge_drawn_c: self.charge_c,
        }
    }

    /// Exact solution of the RC network over `h` seconds with constant power `p` into the die:
    /// x(t+h) = x* + e^{A h} (x(t) − x*), with x* the equilibrium for `p`.
    fn advance_thermal(&mut self, h: f64, p: f64) {
        let (d, s) = thermal_exact(&self.p, self.die_c, self.skin_c, p, h);
        self.die_c = d;
        self.skin_c = s;
    }

    /// One vendor poll: step_wise on every trip point, then the cap moves one level.
    fn vendor_poll(&mut self) {
        let mut floor: Option<usize> = None;
        let mut rising = false;
        for (i, trip) in self.p.trips.iter().enumerate() {
            let t = match trip.sensor {
                TripSensor::Die => self.die_c,
                TripSensor::Skin => self.skin_c,
            };
            if t >= trip.temp_c {
                self.latched[i] = true;
                rising = true;
                floor = Some(floor.map_or(trip.floor_level, |f: usize| f.min(trip.floor_level)));
            } else if t < trip.temp_c - trip.hyst_c {
                self.latched[i] = false;
            }
        }
        if rising {
            let f = floor.unwrap_or(0);
            if self.cap_level > f {
                self.cap_level -= 1;
            }
        } else if !self.vendor_throttling() && self.cap_level < self.p.max_level() {
            self.cap_level += 1;
        }
    }
}

/// Die and skin temperatures after `h` seconds at constant power `p`, from (`die`, `skin`).
/// Closed form of the two-node RC network (see `docs/TELEMETRY.md`): the system matrix has two
/// distinct negative real eigenvalues for any positive parameters, so
/// e^{A h} = (e^{λ₁h}(A − λ₂I) − e^{λ₂h}(A − λ₁I)) / (λ₁ − λ₂).
pub fn thermal_exact(prof: &HandsetProfile, die: f64, skin: f64, p: f64, h: f64) -> (f64, f64) {
    let a = 1.0 / (prof.c_die_j_per_k * prof.r_die_skin_k_per_w);
    let b = 1.0 / (prof.c_skin_j_per_k * prof.r_die_skin_k_per_w);
    let c = 1.0 / (prof.c_skin_j_per_k * prof.r_skin_amb_k_per_w);
    // A = [[-a, a], [b, -(b + c)]] acting on (die, skin) deviations.
    let tr = -(a + b + c);
    let det = a * c;
    let disc = (tr * tr - 4.0 * det).max(0.0).sqrt();
    let l1 = 0.5 * (tr + disc);
    let l2 = 0.5 * (tr - disc);
    let skin_eq = prof.ambient_c + p * prof.r_skin_amb_k_per_w;
    let die_eq = skin_eq + p * prof.r_die_skin_k_per_w;
    let (x0, y0) = (die - die_eq, skin - skin_eq);
    let e1 = (l1 * h).exp();
    let e2 = (l2 * h).exp();
    let k = l1 - l2; // > 0: disc > 0 whenever b > 0
    // (A − λI) applied to (x0, y0).
    let m = |l: f64| (((-a - l) * x0 + a * y0), (b * x0 + (-(b + c) - l) * y0));
    let (p2x, p2y) = m(l2);
    let (p1x, p1y) = m(l1);
    let x = (e1 * p2x - e2 * p1x) / k;
    let y = (e1 * p2y - e2 * p1y) / k;
    (die_eq + x, skin_eq + y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sd() -> HandsetProfile {
        profile("snapdragon-8gen3").expect("built-in profile")
    }

    /// Explicit Euler with a tiny step as an independent reference for the closed form.
    fn euler(p: &HandsetProfile, mut d: f64, mut s: f64, pw: f64, t: f64) -> (f64, f64) {
        let h = 1e-3;
        let n = (t / h).round() as usize;
        for _ in 0..n {
            let q_ds = (d - s) / p.r_die_skin_k_per_w;
            let q_sa = (s - p.ambient_c) / p.r_skin_amb_k_per_w;
            d += h * (pw - q_ds) / p.c_die_j_per_k;
            s += h * (q_ds - q_sa) / p.c_skin_j_per_k;
        }
        (d, s)
    }

    #[test]
    fn exact_discretization_matches_fine_euler() {
        let p = sd();
        let (d, s) = thermal_exact(&p, 30.0, 28.0, 5.0, 40.0);
        let (de, se) = euler(&p, 30.0, 28.0, 5.0, 40.0);
        assert!((d - de).abs() < 2e-3, "die {d} vs {de}");
        assert!((s - se).abs() < 2e-3, "skin {s} vs {se}");
    }

    #[test]
    fn steady_state_is_the_resistor_ladder() {
        let p = sd();
        // 4 W: skin = 25 + 4·4 = 41, die = 41 + 4·6 = 65, reached after many time constants.
        let (d, s) = thermal_exact(&p, 25.0, 25.0, 4.0, 1e5);
        assert!(
            (s - 41.0).abs() < 1e-6 && (d - 65.0).abs() < 1e-6,
            "{d} {s}"
        );
    }

    #[test]
    fn one_long_step_equals_many_short_ones() {
        let p = sd();
        let (mut d, mut s) = (25.0, 25.0);
        for _ in 0..100 {
            (d, s) = thermal_exact(&p, d, s, 6.0, 0.5);
        }
        let (d1, s1) = thermal_exact(&p, 25.0, 25.0, 6.0, 50.0);
        assert!((d - d1).abs() < 1e-9 && (s - s1).abs() < 1e-9);
    }

    #[test]
    fn energy_is_power_times_time_and_battery_agrees() {
        let mut m = HandsetModel::new(sd());
        let act = Activity {
            busy: 0.5,
            freq_level: 3,
        };
        let out = m.step(10.0, act);
        let expect = m.profile().power_w(3, 0.5) * 10.0;
        assert!((out.energy_j - expect).abs() < 1e-9);
        // V·I equals the power delivered.
        assert!((out.battery_v * out.battery_a - out.power_w).abs() < 1e-9);
        assert!(out.battery_v < m.battery_ocv() && out.battery_v > 3.5);
        // Charge drawn is ∫I dt; the current rises by a few ppm as the cell discharges.
        let rel = (out.charge_drawn_c - out.battery_a * 10.0).abs() / out.charge_drawn_c;
        assert!(rel < 1e-4, "{rel}");
    }

    #[test]
    fn power_follows_f_v_squared() {
        let p = sd();
        // Level 0: 441.6 MHz at 0.56 V vs the top 3302.4 MHz at 1.03 V.
        let ratio = (441_600.0 * 0.56f64.powi(2)) / (3_302_400.0 * 1.03f64.powi(2));
        let expect = 0.8 + 7.2 * ratio + 0.6 * 441_600.0 / 3_302_400.0;
        assert!((p.power_w(0, 1.0) - expect).abs() < 1e-12);
        assert!((p.max_power_w() - 8.6).abs() < 1e-12);
        assert_eq!(p.power_w(5, 0.0), 0.8);
    }

    #[test]
    fn vendor_throttles_when_hot_and_releases_when_cool() {
        let mut m = HandsetModel::new(sd());
        let top = m.profile().max_level();
        let full = Activity {
            busy: 1.0,
            freq_level: top,
        };
        let mut engaged = false;
        for _ in 0..1200 {
            let o = m.step(1.0, full);
            engaged |= o.vendor_cap_level < top;
            assert!(o.die_c < 101.0, "die ran away: {}", o.die_c);
        }
        assert!(engaged && m.vendor_throttling());
        // 8.6 W unthrottled would settle the die at 25 + 8.6·10 = 111 °C; the vendor holds it near 85.
        assert!(m.die_c() < 90.0);
        let idle = Activity {
            busy: 0.0,
            freq_level: 0,
        };
        for _ in 0..3000 {
            m.step(1.0, idle);
        }
        assert_eq!(m.vendor_cap_level(), top);
        assert!(!m.vendor_throttling());
    }

    #[test]
    fn nonpositive_or_nan_dt_changes_nothing() {
        let mut m = HandsetModel::new(sd());
        m.step(
            5.0,
            Activity {
                busy: 1.0,
                freq_level: 9,
            },
        );
        let before = (m.die_c(), m.skin_c(), m.energy_j());
        m.step(
            0.0,
            Activity {
                busy: 1.0,
                freq_level: 9,
            },
        );
        m.step(
            -1.0,
            Activity {
                busy: 1.0,
                freq_level: 9,
            },
        );
        m.step(
            f64::NAN,
            Activity {
                busy: 1.0,
                freq_level: 9,
            },
        );
        assert_eq!(before, (m.die_c(), m.skin_c(), m.energy_j()));
    }

    #[test]
    fn sustainable_throughput_hand_check() {
        let p = sd();
        // 42 °C skin: P* = 17/4 = 4.25 W. No OPP's full-busy power equals 4.25 W exactly,
        // so the optimum lies on a chord; it cannot beat running the top OPP at the duty
        // that spends 4.25 W, and must beat it (lower OPPs are more efficient per joule).
        let best = p.sustainable_tokens_per_s(42.0);
        let duty_top = (4.25 - 0.8) / p.active_w(9);
        let top_only = 22.0 * duty_top;
        assert!(best > top_only * 1.2, "{best} vs {top_only}");
        // Upper bound: every token at the most efficient OPP (level 0) per active watt.
        let eff0 = p.tokens_per_s(0, 1.0) / p.active_w(0);
        assert!(best <= eff0 * 3.45 + 1e-9);
        // Above the top OPP's power, the answer is the unthrottled rate.
        assert!((p.sustainable_tokens_per_s(80.0) - 22.0).abs() < 1e-12);
        assert_eq!(p.sustainable_tokens_per_s(25.0), 0.0);
    }

    #[test]
    fn profiles_are_distinct_and_complete() {
        for name in profile_names() {
            let p = profile(name).expect("listed profile exists");
            assert_eq!(p.name, *name);
            assert!(
                p.opps
                    .windows(2)
                    .all(|w| w[0].freq_khz < w[1].freq_khz && w[0].voltage_mv <= w[1].voltage_mv)
            );
            assert!(p.trips.iter().all(|t| t.floor_level <= p.max_level()));
        }
        assert_ne!(profile("pixel-8-pro"), profile("snapdragon-8gen3"));
        assert!(profile("nokia-3310").is_none());
    }
}
