//! Result schema, statistics, renderers, comparison and the release gate.
