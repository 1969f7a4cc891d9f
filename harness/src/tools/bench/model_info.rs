//! The model columns of a bench row: name, file size, parameter count and tensor-type mix,
//! read from the GGUF file.

use crate::meta;
use anyhow::{Context, Result};
use pocketperf_runtime::gguf::{GgufFile, TensorInfo};
use std::collections::BTreeMap;
use std::path::Path;

/// Types below this share of the parameters are left out of the type mix.
const MIX_MIN_SHARE: f64 = 0.01;
/// At most this many types are named in the type mix.
const MIX_MAX_TYPES: usize = 3;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelColumns {
    /// `general.name` of the GGUF (`unknown` without one).
    pub model: String,
    pub model_path: String,
    pub model_size_bytes: u64,
    /// Elements of every tensor in the file.
    pub model_params: u64,
    /// The dominant tensor types with their share of the parameters, largest first
    /// (`Q4_1 92% F32 5% Q8_0 3%`).
    pub type_mix: String,
}

impl ModelColumns {
    pub fn read(path: &Path) -> Result<ModelColumns> {
        let g = GgufFile::open(path).with_context(|| format!("{}", path.display()))?;
        let size = std::fs::metadata(path)
            .with_context(|| format!("{}: cannot stat", path.display()))?
            .len();
        Ok(ModelColumns {
            model: meta::model_name_in(&g),
            model_path: path.display().to_string(),
            model_size_bytes: size,
            model_params: g.tensors().iter().map(TensorInfo::n_elements).sum(),
            type_mix: type_mix(g.tensors()),
        })
    }
}

/// The types holding at least 1% of the parameters (at most three), each with its share in
/// whole percent, largest first; ties by name.
pub fn type_mix(tensors: &[TensorInfo]) -> String {
    let mut by_type: BTreeMap<&'static str, u64> = BTreeMap::new();
    for t in tensors {
        *by_type.entry(t.ty.name()).or_default() += t.n_elements();
    }
    let total: u64 = by_type.values().sum();
    if total == 0 {
        return "-".into();
    }
    let mut v: Vec<(&str, u64)> = by_type.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.iter()
        .take(MIX_MAX_TYPES)
        .filter(|(_, n)| *n as f64 / total as f64 >= MIX_MIN_SHARE)
        .map(|(name, n)| format!("{name} {:.0}%", *n as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pocketperf_runtime::GgmlType;

    fn t(ty: GgmlType, n: u64) -> TensorInfo {
        TensorInfo {
            name: String::new(),
            dims: vec![n],
            ty,
            offset: 0,
            n_bytes: 0,
        }
    }

    #[test]
    fn type_mix_names_the_dominant_types_by_share_of_parameters() {
        // 900 + 60 Q4_1, 30 F32, 5 Q8_0, 5 F16 of 1000: Q8_0 and F16 are under 1% each.
        let ts = [
            t(GgmlType::Q4_1, 900),
            t(GgmlType::F32, 30),
            t(GgmlType::Q4_1, 60),
            t(GgmlType::Q8_0, 5),
            t(GgmlType::F16, 5),
        ];
        assert_eq!(type_mix(&ts), "Q4_1 96% F32 3%");
        let ts = [
            t(GgmlType::Q4K, 50),
            t(GgmlType::Q6K, 30),
            t(GgmlType::F32, 15),
            t(GgmlType::Q8_0, 5),
        ];
        assert_eq!(type_mix(&ts), "Q4_K 50% Q6_K 30% F32 15%");
        assert_eq!(type_mix(&[]), "-");
    }
}
