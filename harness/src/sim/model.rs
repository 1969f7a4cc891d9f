//! Two-node RC thermal model and power model of simulated handsets (filled in by its owner).
