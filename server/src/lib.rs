//! placeholder

pub mod router;
