//! The real consumer: a checksummed retained log on disk, an SQLite (default) or PostgreSQL
//! store for effects and progress, every strategy of spec.md §5 as real code, named crash
//! points, power cuts on a simulated disk, and the external systems of the seeds' edge cases (an
//! email provider, an index, the outbox's relay).

pub mod crash;
pub mod external;
pub mod log;
pub mod owner;
pub mod power;
pub mod protocol;
pub mod store;
pub mod strategy;
pub mod txn;
pub mod worker;
