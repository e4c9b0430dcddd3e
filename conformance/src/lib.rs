//! Conformance: replays the model's traces against the real consumer step by step and checks
//! that states and verdicts agree. The only crate that sees both `model` and `consumer`.

#[cfg(all(feature = "kafka", target_os = "linux"))]
pub mod app;
pub mod batch;
pub mod corpus;
pub mod coverage;
pub mod crosscheck;
pub mod diff;
pub mod driver;
pub mod error;
pub mod fences;
pub mod generate;
pub mod harness;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod killpoints;
pub mod observe;
pub mod output;
pub mod protocol;
pub mod replay;
pub mod scenarios;

pub use error::Error;
