//! OpenCL platforms and devices: the listing `pocketperf probe` prints and the
//! `--cl-platform` / `--cl-device` selection.
//!
//! libOpenCL is loaded at run time (opencl3's `dynamic` feature): a machine without an ICD
//! loader or without any driver gets a one-line error saying which is missing, never a
//! link failure.

use crate::error::{Error, Result};
use opencl3::device::{
    CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU,
    CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT, Device,
};
use opencl3::error_codes::ClError;
use opencl3::platform::Platform;

/// ocl-icd's `CL_PLATFORM_NOT_FOUND_KHR`: the loader found no driver.
const PLATFORM_NOT_FOUND_KHR: i32 = -1001;
/// cl3's code for "libOpenCL could not be loaded".
const DLOPEN_RUNTIME_LOAD_FAILED: i32 = -2000;
/// `CL_QUEUE_PROFILING_ENABLE`.
const QUEUE_PROFILING: u64 = 1 << 1;

/// One OpenCL platform and its devices.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClPlatformInfo {
    pub index: usize,
    pub name: String,
    pub vendor: String,
    pub version: String,
    pub devices: Vec<ClDeviceInfo>,
}

/// What the backend needs to know about a device (and what `probe` shows).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClDeviceInfo {
    pub index: usize,
    pub name: String,
    pub vendor: String,
    /// `gpu`, `cpu`, `accelerator` or `other`.
    pub device_type: String,
    pub version: String,
    pub driver_version: String,
    pub opencl_c_version: String,
    pub compute_units: u32,
    pub max_clock_mhz: u32,
    pub max_work_group_size: usize,
    pub local_mem_bytes: u64,
    pub global_mem_bytes: u64,
    pub max_alloc_bytes: u64,
    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN` in bytes (sub-buffer origins, host-pointer import).
    pub mem_base_addr_align: u64,
    /// Device and host share memory (zero-copy import is then truly copy-free).
    pub host_unified_memory: bool,
    /// The host queue supports `CL_QUEUE_PROFILING_ENABLE` (kernel times are reported).
    pub profiling: bool,
    pub fp16: bool,
    pub fp64: bool,
    /// `-cl-fp32-correctly-rounded-divide-sqrt` is available.
    pub correctly_rounded_div_sqrt: bool,
}

fn cl_err(what: &str, e: ClError) -> Error {
    Error::OpenCl(format!("{what}: {e} ({})", e.0))
}

/// The platforms the ICD loader sees, with a precise error when there are none.
fn platforms() -> Result<Vec<Platform>> {
    match opencl3::platform::get_platforms() {
        Ok(p) if !p.is_empty() => Ok(p),
        Ok(_) => Err(no_platform()),
        Err(e) if e.0 == PLATFORM_NOT_FOUND_KHR => Err(no_platform()),
        Err(e) if e.0 == DLOPEN_RUNTIME_LOAD_FAILED => Err(Error::OpenCl(
            "cannot load the OpenCL library libOpenCL.so.1: install an ICD loader (Debian: \
             ocl-icd-libopencl1) or point OPENCL_DYLIB_PATH at one"
                .into(),
        )),
        Err(e) => Err(cl_err("listing platforms", e)),
    }
}

fn no_platform() -> Error {
    Error::OpenCl(
        "no OpenCL platform found: the ICD loader sees no driver (install one, e.g. the Debian \
         package pocl-opencl-icd, or check /etc/OpenCL/vendors and OCL_ICD_VENDORS)"
            .into(),
    )
}

fn type_name(t: u64) -> &'static str {
    if t & CL_DEVICE_TYPE_GPU != 0 {
        "gpu"
    } else if t & CL_DEVICE_TYPE_CPU != 0 {
        "cpu"
    } else if t & CL_DEVICE_TYPE_ACCELERATOR != 0 {
        "accelerator"
    } else {
        "other"
    }
}

pub(crate) fn device_info(index: usize, d: &Device) -> Result<ClDeviceInfo> {
    let q = |what: &str, e: ClError| cl_err(&format!("querying device {index} {what}"), e);
    let ext = d.extensions().map_err(|e| q("extensions", e))?;
    let has = |name: &str| ext.split_whitespace().any(|x| x == name);
    Ok(ClDeviceInfo {
        index,
        name: d.name().map_err(|e| q("name", e))?.trim().to_string(),
        vendor: d.vendor().map_err(|e| q("vendor", e))?.trim().to_string(),
        device_type: type_name(d.dev_type().map_err(|e| q("type", e))?).into(),
        version: d.version().map_err(|e| q("version", e))?.trim().to_string(),
        driver_version: d
            .driver_version()
            .map_err(|e| q("driver", e))?
            .trim()
            .to_string(),
        opencl_c_version: d.opencl_c_version().unwrap_or_default().trim().to_string(),
        compute_units: d.max_compute_units().map_err(|e| q("compute units", e))?,
        max_clock_mhz: d.max_clock_frequency().unwrap_or(0),
        max_work_group_size: d
            .max_work_group_size()
            .map_err(|e| q("work-group size", e))?,
        local_mem_bytes: d.local_mem_size().map_err(|e| q("local memory", e))?,
        global_mem_bytes: d.global_mem_size().map_err(|e| q("global memory", e))?,
        max_alloc_bytes: d.max_mem_alloc_size().map_err(|e| q("max allocation", e))?,
        mem_base_addr_align: u64::from(d.mem_base_addr_align().unwrap_or(1024)) / 8,
        host_unified_memory: d.host_unified_memory().unwrap_or(false),
        profiling: d.queue_on_host_properties().unwrap_or(0) & QUEUE_PROFILING != 0,
        fp16: has("cl_khr_fp16"),
        fp64: has("cl_khr_fp64"),
        correctly_rounded_div_sqrt: d.single_fp_config().unwrap_or(0)
            & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
            != 0,
    })
}

fn devices_of(p: &Platform) -> Result<Vec<Device>> {
    match p.get_devices(CL_DEVICE_TYPE_ALL) {
        Ok(ids) => Ok(ids.into_iter().map(Device::new).collect()),
        // CL_DEVICE_NOT_FOUND: a platform without devices.
        Err(e) if e.0 == -1 => Ok(Vec::new()),
        Err(e) => Err(cl_err("listing devices", e)),
    }
}

/// Every platform and device the ICD loader sees (for `pocketperf probe`). Errors when
/// libOpenCL cannot be loaded or no platform exists.
pub fn list_devices() -> Result<Vec<ClPlatformInfo>> {
    let mut out = Vec::new();
    for (i, p) in platforms()?.iter().enumerate() {
        let q = |what: &str, e: ClError| cl_err(&format!("querying platform {i} {what}"), e);
        let devices = devices_of(p)?
            .iter()
            .enumerate()
            .map(|(j, d)| device_info(j, d))
            .collect::<Result<Vec<_>>>()?;
        out.push(ClPlatformInfo {
            index: i,
            name: p.name().map_err(|e| q("name", e))?.trim().to_string(),
            vendor: p.vendor().map_err(|e| q("vendor", e))?.trim().to_string(),
            version: p.version().map_err(|e| q("version", e))?.trim().to_string(),
            devices,
        });
    }
    Ok(out)
}

/// Whether `sel` picks item `index` named `names`: a number is an index, anything else a
/// case-insensitive substring of one of the names.
fn matches(sel: &str, index: usize, names: &[&str]) -> bool {
    match sel.trim().parse::<usize>() {
        Ok(i) => i == index,
        Err(_) => {
            let s = sel.trim().to_lowercase();
            names.iter().any(|n| n.to_lowercase().contains(&s))
        }
    }
}

/// The platform and device chosen by the selectors (index or name substring). Without a
/// device selector the first GPU of the chosen platform(s) wins, else the first device.
pub(crate) fn select(
    platform: Option<&str>,
    device: Option<&str>,
) -> Result<(ClPlatformInfo, Device, ClDeviceInfo)> {
    let listing = list_devices()?;
    let plats = platforms()?;
    let candidates: Vec<usize> = match platform {
        Some(sel) => {
            let c: Vec<usize> = listing
                .iter()
                .filter(|p| matches(sel, p.index, &[&p.name, &p.vendor]))
                .map(|p| p.index)
                .collect();
            if c.is_empty() {
                return Err(Error::InvalidArgument {
                    what: "cl-platform".into(),
                    reason: format!("`{sel}` matches none of {}", describe(&listing)),
                });
            }
            c
        }
        None => listing.iter().map(|p| p.index).collect(),
    };
    let all = || {
        candidates
            .iter()
            .flat_map(|&pi| listing[pi].devices.iter().map(move |d| (pi, d)))
    };
    let found = match device {
        Some(sel) => all()
            .find(|(_, d)| matches(sel, d.index, &[&d.name, &d.vendor, &d.device_type]))
            .map(|(pi, d)| (pi, d.index)),
        None => all()
            .find(|(_, d)| d.device_type == "gpu")
            .or_else(|| all().next())
            .map(|(pi, d)| (pi, d.index)),
    };
    let Some((pi, di)) = found else {
        return Err(match device {
            Some(sel) => Error::InvalidArgument {
                what: "cl-device".into(),
                reason: format!("`{sel}` matches none of {}", describe(&listing)),
            },
            None => Error::OpenCl(format!("no OpenCL device found ({})", describe(&listing))),
        });
    };
    let dev = devices_of(&plats[pi])?
        .into_iter()
        .nth(di)
        .ok_or_else(|| Error::OpenCl(format!("device {di} of platform {pi} disappeared")))?;
    let info = listing[pi].devices[di].clone();
    Ok((listing[pi].clone(), dev, info))
}

/// One line naming every platform and device, for error messages.
fn describe(listing: &[ClPlatformInfo]) -> String {
    let mut parts = Vec::new();
    for p in listing {
        let devs: Vec<String> = p
            .devices
            .iter()
            .map(|d| format!("device {}: {} ({})", d.index, d.name, d.device_type))
            .collect();
        parts.push(format!(
            "platform {}: {} [{}]",
            p.index,
            p.name,
            if devs.is_empty() {
                "no devices".to_string()
            } else {
                devs.join(", ")
            }
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_take_an_index_or_a_name_substring() {
        assert!(matches("0", 0, &["Portable Computing Language"]));
        assert!(!matches("1", 0, &["Portable Computing Language"]));
        assert!(matches("portable", 3, &["Portable Computing Language"]));
        assert!(matches(" GPU ", 0, &["Adreno", "gpu"]));
        assert!(!matches("mali", 0, &["Adreno", "gpu"]));
    }
}
