//! Simulated handsets: thermal/power model and the sysfs tree they expose.

pub mod model;
