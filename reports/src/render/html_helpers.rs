//! Series derived from the CSV members, as the HTML report plots them, and the page frame
//! (for pages built outside this crate). A file of its own so the re-export points one way:
//! `render` declares it, it reaches into `html`.

pub use super::html::{
    cumulative_energy_j, figure, page_end, page_start, page_start_styled, tokens_per_s_over_time,
};
