//! Ring-buffer bytes to typed records. Nothing here touches the kernel: it decodes byte slices,
//! so it is tested on bytes made in the test. This module decodes the thread ring; `socket` the
//! socket ring.

pub mod socket;

use gateway_observer_common::{EVENT_SIZE, Event, event_kind};

/// A decoded ring-buffer record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A target thread was off-CPU longer than the block threshold.
    Block(Block),
    ThreadExit {
        tid: u32,
        tgid: u32,
    },
    /// A target forked a new process that is now a target too.
    ProcessFork {
        parent_tgid: u32,
        child_tgid: u32,
    },
    /// An event-loop iteration stayed on CPU past the busy threshold.
    LongIteration(LongIteration),
    /// The user stack of the thread's last long block, by id in the STACKS map.
    BlockStack {
        tid: u32,
        tgid: u32,
        stack_id: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongIteration {
    pub tid: u32,
    pub tgid: u32,
    pub on_cpu_ns: u64,
    pub iteration_ns: u64,
    pub timestamp_ns: u64,
    /// Still running: measured at a tick from the thread's slot, not reported at its end.
    pub ongoing: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub tid: u32,
    pub tgid: u32,
    /// `reason::*`
    pub reason: u32,
    /// Syscall number, or `None` when the thread was in none.
    pub syscall_nr: Option<u32>,
    pub waker_tid: u32,
    pub wait_ns: u64,
    pub runqueue_ns: u64,
    pub futex_uaddr: u64,
    pub timestamp_ns: u64,
    /// The user stack of the blocking call, once its BlockStack record arrives.
    pub stack_id: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("event of {0} bytes, expected {EVENT_SIZE}")]
    Size(usize),
    #[error("unknown event kind {0}")]
    Kind(u32),
}

/// Decodes one record. The buffer need not be aligned: the bytes are copied out.
pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    if bytes.len() < EVENT_SIZE {
        return Err(DecodeError::Size(bytes.len()));
    }
    // SAFETY: Event is repr(C) plain integers (every bit pattern valid) and the slice holds at
    // least size_of::<Event>() bytes; read_unaligned makes no alignment assumption.
    let event: Event = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Event>()) };
    match event.kind {
        event_kind::BLOCK => Ok(Record::Block(Block {
            tid: event.tid,
            tgid: event.tgid,
            reason: event.reason,
            syscall_nr: u32::try_from(event.syscall_nr).ok(),
            waker_tid: event.waker_tid,
            wait_ns: event.wait_ns,
            runqueue_ns: event.runqueue_ns,
            futex_uaddr: event.futex_uaddr,
            timestamp_ns: event.timestamp_ns,
            stack_id: None,
        })),
        event_kind::BLOCK_STACK => Ok(Record::BlockStack { tid: event.tid, tgid: event.tgid, stack_id: event.reason }),
        event_kind::THREAD_EXIT => Ok(Record::ThreadExit { tid: event.tid, tgid: event.tgid }),
        event_kind::LONG_ITERATION => Ok(Record::LongIteration(LongIteration {
            tid: event.tid,
            tgid: event.tgid,
            on_cpu_ns: event.wait_ns,
            iteration_ns: event.runqueue_ns,
            timestamp_ns: event.timestamp_ns,
            ongoing: false,
        })),
        event_kind::PROCESS_FORK => Ok(Record::ProcessFork { parent_tgid: event.tgid, child_tgid: event.reason }),
        other => Err(DecodeError::Kind(other)),
    }
}

#[cfg(test)]
mod tests {
    use gateway_observer_common::reason;

    use super::*;

    fn bytes_of(event: &Event) -> Vec<u8> {
        // SAFETY: Event is repr(C) plain integers with no padding.
        unsafe { std::slice::from_raw_parts((event as *const Event).cast::<u8>(), EVENT_SIZE) }.to_vec()
    }

    #[test]
    fn decodes_a_block_from_unaligned_bytes() {
        let event = Event {
            kind: event_kind::BLOCK,
            tid: 42,
            tgid: 40,
            reason: reason::FUTEX_TIMED,
            syscall_nr: 202,
            waker_tid: 41,
            wait_ns: 170_000,
            runqueue_ns: 3_000,
            futex_uaddr: 0x7f00_dead_beef,
            timestamp_ns: 99,
        };
        let mut shifted = vec![0u8];
        shifted.extend(bytes_of(&event));
        let record = decode(&shifted[1..]).expect("decodes");
        let Record::Block(block) = record else { panic!("not a block: {record:?}") };
        assert_eq!(block.tid, 42);
        assert_eq!(block.syscall_nr, Some(202));
        assert_eq!(block.wait_ns, 170_000);
        assert_eq!(block.futex_uaddr, 0x7f00_dead_beef);
    }

    #[test]
    fn no_syscall_is_none() {
        let event = Event { kind: event_kind::BLOCK, syscall_nr: -1, ..Event::default() };
        let Ok(Record::Block(block)) = decode(&bytes_of(&event)) else { panic!("block") };
        assert_eq!(block.syscall_nr, None);
    }

    #[test]
    fn lifecycle_events() {
        let exit = Event { kind: event_kind::THREAD_EXIT, tid: 7, tgid: 5, ..Event::default() };
        assert_eq!(decode(&bytes_of(&exit)), Ok(Record::ThreadExit { tid: 7, tgid: 5 }));
        let fork = Event { kind: event_kind::PROCESS_FORK, tgid: 5, reason: 9, ..Event::default() };
        assert_eq!(decode(&bytes_of(&fork)), Ok(Record::ProcessFork { parent_tgid: 5, child_tgid: 9 }));
    }

    #[test]
    fn long_iteration() {
        let e = Event {
            kind: event_kind::LONG_ITERATION,
            tid: 3,
            tgid: 2,
            wait_ns: 250,
            runqueue_ns: 300,
            timestamp_ns: 9,
            ..Event::default()
        };
        let expected =
            LongIteration { tid: 3, tgid: 2, on_cpu_ns: 250, iteration_ns: 300, timestamp_ns: 9, ongoing: false };
        assert_eq!(decode(&bytes_of(&e)), Ok(Record::LongIteration(expected)));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(decode(&[1, 2, 3]), Err(DecodeError::Size(3)));
        let unknown = Event { kind: 77, ..Event::default() };
        assert_eq!(decode(&bytes_of(&unknown)), Err(DecodeError::Kind(77)));
    }
}
