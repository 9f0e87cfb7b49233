//! Java frames of a JVM's threads without an agent, a flag or a restart: HotSpot's dynamic attach
//! (`attach`), the dump's text read as hostile (`dump`), taken on a worker thread (`worker`),
//! summed up for alert evidence (`summary`), loops it caught idle between two waits (`idle`). Nothing here touches the probes or the tick's state.

pub mod attach;
pub mod dump;
pub mod idle;
pub mod summary;
pub mod worker;
