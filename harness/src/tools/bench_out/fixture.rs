//! A fixed report the exporters' snapshot tests render: one model, a pp row and a tg row at
//! depth 256, no roofline.

use crate::meta::{HostInfo, OutputHeader};
use crate::tools::bench::model_info::ModelColumns;
use crate::tools::bench::rows::{BenchReport, BenchRow, Measured, MemoryReport, TestKind};

pub fn report() -> BenchReport {
    let model = ModelColumns {
        model: "Tiny".into(),
        model_path: "/m/tiny.gguf".into(),
        model_size_bytes: 90_000_000,
        model_params: 134_515_008,
        type_mix: "Q4_1 96% F32 3%".into(),
    };
    let pp = Measured {
        kind: TestKind::Prompt,
        n: 64,
        depth: 0,
        samples: vec![900.0, 1000.0, 1100.0],
        bytes: (50_000_000, 0),
    };
    let tg = Measured {
        kind: TestKind::Generate,
        n: 16,
        depth: 256,
        samples: vec![200.0, 250.0],
        bytes: (50_000_000, 1_000_000),
    };
    BenchReport {
        header: OutputHeader {
            schema_version: 3,
            tool: "pocketperf",
            tool_version: "0.0.0",
            git_commit: "abc1234",
            device: HostInfo {
                id: "local".into(),
                name: "host".into(),
                cpu: "cpu X".into(),
                os: "Linux 6".into(),
            },
            model_path: "/m/tiny.gguf".into(),
            model_name: "Tiny".into(),
            model_sha256: "00ff".into(),
            settings: serde_json::json!({"threads": [2]}),
            timestamp_utc: "2026-01-01T00:00:00.000Z".into(),
        },
        rows: vec![
            BenchRow::new(&model, "avx2", "cpu", 2, pp),
            BenchRow::new(&model, "avx2", "cpu", 2, tg),
        ],
        roofline: None,
        memory: MemoryReport {
            peak_rss_bytes: Some(80_000_000),
            model_file_bytes: 90_000_000,
            kv_bytes: 1_048_576,
            budget_bytes: 95_000_000,
            within_budget: Some(true),
        },
        startup: None,
        cold_start: None,
    }
}
