//! The real consumer: a checksummed retained log on disk, an SQLite (default) or PostgreSQL
//! store for effects and progress, every strategy of spec.md §5 as real code, named crash
//! points, and power cuts on a simulated disk.

pub mod crash;
pub mod log;
pub mod owner;
pub mod power;
pub mod store;
pub mod strategy;
pub mod txn;
pub mod worker;
