//! (module under construction: filled in by its owner)
