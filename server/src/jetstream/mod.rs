//! JetStream: the meta group, stream groups and the `$JS.API` surface. See DESIGN.md §2-3.

pub mod meta;
pub mod op;
