//! Closed-loop governor simulation in virtual time (filled in by its owner).
