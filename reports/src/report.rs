//! The per-run report files: `report.html` (self-contained, inline SVG) and `report.md`,
//! written into the result directory they describe (each through a temporary file renamed
//! into place, so a symlink there is replaced, not written through).

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{ReportError, Result};
use crate::render::{Exporter, MarkdownExporter, RenderContext, RunData, render_html};
use crate::schema::{REPORT_HTML, REPORT_MD};

/// Renders the HTML report of the result directory `dir`, stamped with the current time.
pub fn render_report(dir: impl AsRef<Path>) -> Result<String> {
    render_html(&RunData::load(dir)?, &RenderContext::now())
}

/// Writes `report.html` and `report.md` into `dir`; returns their paths.
pub fn write_report(dir: impl AsRef<Path>) -> Result<(PathBuf, PathBuf)> {
    write_report_at(dir, &RenderContext::now())
}

/// [`write_report`] with an injected render time.
pub fn write_report_at(dir: impl AsRef<Path>, ctx: &RenderContext) -> Result<(PathBuf, PathBuf)> {
    write_report_to(dir.as_ref(), dir.as_ref(), ctx)
}

/// Renders the result directory `dir` into `out/report.html` and `out/report.md`
/// (creating `out`); returns their paths.
pub fn write_report_to(
    dir: impl AsRef<Path>,
    out: impl AsRef<Path>,
    ctx: &RenderContext,
) -> Result<(PathBuf, PathBuf)> {
    let (dir, out) = (dir.as_ref(), out.as_ref());
    let run = RunData::load(dir)?;
    fs::create_dir_all(out).map_err(|e| ReportError::io("creating directory", out, e))?;
    let html_path = out.join(REPORT_HTML);
    replace_file(&html_path, render_html(&run, ctx)?.as_bytes())?;
    let md_path = out.join(REPORT_MD);
    replace_file(&md_path, MarkdownExporter.render(&run, ctx)?.as_bytes())?;
    Ok((html_path, md_path))
}

/// Writes `bytes` to `path` through [`crate::files::replace_file`].
fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::files::replace_file(path, bytes).map_err(|(p, e)| ReportError::io("writing", &p, e))
}
