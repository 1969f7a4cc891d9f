//! `--output csv`: the output header as `# key=value` lines, the summary lines as `# ` lines,
//! then one record per row in [`super::COLUMNS`] order through `csv::Writer` (a reader that
//! skips `#` comment lines gets a plain table).

use super::{COLUMNS, Cell, cells, summary};
use crate::tools::bench::rows::BenchReport;
use pocketperf_reports::render::csv_after_comments;

fn comments(r: &BenchReport) -> String {
    let mut s = String::new();
    for (k, v) in r.header.pairs() {
        s += &format!("# {k}={}\n", v.replace('\n', " "));
    }
    for l in summary::lines(r) {
        s += &format!("# {l}\n");
    }
    s
}

pub fn render(r: &BenchReport) -> String {
    csv_after_comments(comments(r), |w| {
        w.write_record(COLUMNS)?;
        for row in &r.rows {
            w.write_record(cells(row).iter().map(|c| match c {
                Cell::Text(t) => t.clone(),
                Cell::Int(n) => n.to_string(),
                Cell::Real(x) => x.to_string(),
            }))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bench_out::fixture;

    const WANT: &str = "\
# schema_version=3
# tool=pocketperf 0.0.0
# git_commit=abc1234
# device=host (cpu X, Linux 6)
# model_path=/m/tiny.gguf
# model_name=Tiny
# model_sha256=00ff
# settings={\"threads\":[2]}
# timestamp_utc=2026-01-01T00:00:00.000Z
# peak RSS 76.3 MiB; budget (largest model + KV + 64 MiB) 90.6 MiB
model,model_path,model_size_bytes,model_params,type_mix,isa,backend,threads,test,n_prompt,n_gen,n_depth,batch,reps,tokens_per_s_mean,tokens_per_s_stddev,tokens_per_s_median,tokens_per_s_min,tokens_per_s_max,gb_per_s_median
Tiny,/m/tiny.gguf,90000000,134515008,Q4_1 96% F32 3%,avx2,cpu,2,pp64,64,0,0,1,3,1000,100,1000,900,1100,0
Tiny,/m/tiny.gguf,90000000,134515008,Q4_1 96% F32 3%,avx2,cpu,2,tg16@d256,0,16,256,1,2,225,35.35533905932738,225,200,250,11.475
";

    #[test]
    fn csv_snapshot_and_parse_back() {
        let text = render(&fixture::report());
        assert_eq!(text, WANT);
        let mut rd = ::csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let head: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(head, COLUMNS);
        let recs: Vec<::csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(recs.len(), 2);
        assert_eq!(&recs[0][8], "pp64");
        assert_eq!(&recs[1][8], "tg16@d256");
        assert_eq!(recs[1][11].parse::<usize>().unwrap(), 256);
        assert_eq!(recs[0][15].parse::<f64>().unwrap(), 100.0);
    }
}
