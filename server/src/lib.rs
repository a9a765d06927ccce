//! placeholder

pub mod config;
