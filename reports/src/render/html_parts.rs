//! HTML building blocks shared by the run, compare and gate pages (a file of its own so the
//! re-export points one way: `render` declares it, it reaches into `html`).

pub(crate) use super::html::{figure, page_start, provenance_table};
