use std::{
    cell::RefCell,
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::*;

/// Memory from recorded reads: a read is served if one recorded read holds all of it.
#[derive(Default)]
struct Recorded(Vec<(u64, Vec<u8>)>);

impl Memory for Recorded {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let holder = self.0.iter().find_map(|(at, bytes)| {
            let start = usize::try_from(addr.checked_sub(*at)?).ok()?;
            bytes.get(start..start.checked_add(buf.len())?)
        });
        holder.map(|bytes| buf.copy_from_slice(bytes)).is_some()
    }
}

/// A live process's memory, every read kept.
struct Recorder {
    process: Process,
    reads: RefCell<Vec<(u64, Vec<u8>)>>,
}

impl Memory for Recorder {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let read = self.process.read(addr, buf);
        if read {
            self.reads.borrow_mut().push((addr, buf.to_vec()));
        }
        read
    }
}

/// The recording's text: `version V`, `runtime ADDR`, `tid T`, then `read ADDR HEX` lines.
fn recording_text(version: u32, runtime: u64, tid: u32, reads: &[(u64, Vec<u8>)]) -> String {
    let mut text = format!("version {version:#x}\nruntime {runtime:#x}\ntid {tid}\n");
    for (addr, bytes) in reads {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        text.push_str(&format!("read {addr:#x} {hex}\n"));
    }
    text
}

fn parse_recording(text: &str) -> (u32, u64, u32, Recorded) {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
    let (mut version, mut runtime, mut tid, mut memory) = (0, 0, 0, Recorded::default());
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["version", v] => version = hex(v) as u32,
            ["runtime", r] => runtime = hex(r),
            ["tid", t] => tid = t.parse().expect("tid"),
            ["read", at, bytes] => {
                let bytes = (0..bytes.len()).step_by(2).map(|i| hex(&bytes[i..i + 2]) as u8).collect();
                memory.0.push((hex(at), bytes));
            }
            _ => {}
        }
    }
    (version, runtime, tid, memory)
}

/// `testdata/blocked.py` run by a CPython (3.11.7 from pyenv, the tests' `python3`), its main
/// thread asleep in `handler`, recorded by [`a_live_cpythons_frames`] with
/// `PYTHON_FRAMES_RECORD=1`.
const RECORDING: &str = include_str!("testdata/cpython-3.11.7-blocked.txt");

/// What blocked.py's main thread shows, innermost first, and where its eval calls start.
fn assert_blocked_py(frames: &[PyFrame], minor: u32) {
    let names: Vec<&str> = frames.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.first(), Some(&"handler (blocked.py:3)"), "3.{minor}: {names:#?}");
    assert_eq!(names.get(1), Some(&"serve (blocked.py:5)"), "3.{minor}: {names:#?}");
    assert_eq!(names.last(), Some(&"<module> (blocked.py:7)"), "3.{minor}: {names:#?}");
    assert!(names.iter().any(|n| n.starts_with("BaseEventLoop.run_until_complete (base_events.py:")), "{names:#?}");
    assert!(!frames[0].entry && frames[1].entry, "handler runs in serve's eval call (a coroutine's send)");
    assert!(frames.last().is_some_and(|f| f.entry), "the module's frame is entered from C");
}

#[test]
fn recorded_frames_of_a_thread_asleep_in_a_handler() {
    let (version, runtime, tid, memory) = parse_recording(RECORDING);
    let mut interpreter = Interpreter::new(memory, version, runtime).expect("3.11 is known");
    assert_blocked_py(&interpreter.frames(tid), 11);
    assert_eq!(interpreter.frames(tid + 1), [], "a thread that runs no Python");
}

#[test]
fn recorded_memory_flipped_anywhere_gives_frames_or_none_never_a_panic() {
    let (version, runtime, tid, memory) = parse_recording(RECORDING);
    let reads = memory.0;
    let total: usize = reads.iter().map(|(_, b)| b.len()).sum();
    // Every 7th byte of the recording, each set to 0xff in turn (pointers go wild, lengths huge).
    for flip in (0..total).step_by(7) {
        let mut reads = reads.clone();
        let (mut at, mut done) = (flip, false);
        for (_, bytes) in &mut reads {
            if !done && at < bytes.len() {
                bytes[at] = 0xff;
                done = true;
            }
            at = at.saturating_sub(bytes.len());
        }
        let started = Instant::now();
        let frames = Interpreter::new(Recorded(reads), version, runtime).expect("3.11").frames(tid);
        assert!(frames.len() <= MAX_FRAMES && started.elapsed() < Duration::from_secs(1));
        assert!(frames.iter().all(|f| f.name.chars().count() <= 2 * MAX_CHARS + 40), "{frames:?}");
    }
}

#[test]
fn a_frame_chain_that_loops_ends() {
    let layout = layout::of_version(0x030B_07F0).expect("3.11");
    let layout::CurrentFrame::ViaCFrame(cframe_at, current_at) = layout.current_frame else {
        panic!("3.11 has cframes")
    };
    let (runtime, interp, tstate, cframe, frame) = (0x1000u64, 0x2000u64, 0x3000u64, 0x4000u64, 0x5000u64);
    let word = |at: u64, value: u64| (at, value.to_le_bytes().to_vec());
    let mut frame_bytes = vec![0u8; layout::FRAME_BYTES];
    // Its code is unreadable and its previous frame is itself.
    frame_bytes[layout.frame_code as usize..][..8].copy_from_slice(&0xdead_0000u64.to_le_bytes());
    frame_bytes[layout.frame_previous as usize..][..8].copy_from_slice(&frame.to_le_bytes());
    let memory = Recorded(vec![
        word(runtime + layout.runtime_interpreters, interp),
        word(interp + layout.interp_threads, tstate),
        word(interp + layout.interp_next, interp),
        word(tstate + layout.tstate_native_thread_id, 42),
        word(tstate + layout.tstate_next, tstate),
        word(tstate + cframe_at, cframe),
        word(cframe + current_at, frame),
        (frame, frame_bytes),
    ]);
    let mut interpreter = Interpreter::new(memory, 0x030B_07F0, runtime).expect("3.11");
    assert_eq!(interpreter.frames(42), [], "nothing named, and the loops end");
    assert_eq!(Interpreter::new(Recorded::default(), 0x030D_00F0, runtime).map(|_| ()), None, "3.13: no table");
}

/// Any address reads as a frame with no code whose previous frame is the next 256 bytes up.
struct EndlessFrames {
    reads: std::cell::Cell<usize>,
    previous: usize,
}

impl Memory for EndlessFrames {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.reads.set(self.reads.get() + 1);
        buf.fill(0);
        if let Some(previous) = buf.get_mut(self.previous..self.previous + 8) {
            previous.copy_from_slice(&(addr + 0x100).to_le_bytes());
        }
        true
    }
}

#[test]
fn an_endless_chain_of_unnamed_frames_is_read_a_bounded_number_of_times() {
    for version in [0x030B_07F0, 0x030C_01F0] {
        let layout = layout::of_version(version).expect("known");
        let memory = EndlessFrames { reads: std::cell::Cell::new(0), previous: layout.frame_previous as usize };
        let mut interpreter = Interpreter::new(memory, version, 0).expect("known");
        assert_eq!(interpreter.frames_from(0x5000), [], "3.{}", layout.minor);
        let reads = interpreter.memory.reads.get();
        assert_eq!(reads, MAX_FRAMES_READ, "3.{}: one read a frame, up to the cap", layout.minor);
    }
}

#[test]
fn strings_are_capped_and_cleaned() {
    let layout = layout::of_version(0x030C_01F0).expect("3.12");
    let string = |at: u64, length: u64, state: u32, data: &[u8]| {
        let mut bytes = vec![0u8; layout.compact_data as usize];
        bytes[layout::STR_LENGTH as usize..][..8].copy_from_slice(&length.to_le_bytes());
        bytes[layout::STR_STATE as usize..][..4].copy_from_slice(&state.to_le_bytes());
        let start = if state & (1 << 6) != 0 { layout.ascii_data } else { layout.compact_data } as usize;
        bytes.truncate(start);
        bytes.extend_from_slice(data);
        (at, bytes)
    };
    const ASCII: u32 = (1 << 2) | (1 << 5) | (1 << 6);
    const UCS2: u32 = (2 << 2) | (1 << 5);
    let long = vec![b'x'; 1000];
    let memory = Recorded(vec![
        string(0x1000, 9, ASCII, b"a\x1bb\ncdefg"),
        string(0x2000, 1000, ASCII, &long),
        string(0x3000, 2, UCS2, &[0xe9, 0x00, 0x3b, 0x26]),
        string(0x4000, 3, ASCII & !(1 << 5), b"abc"),
        string(0x5000, u64::MAX, ASCII, b"abc"),
    ]);
    let interpreter = Interpreter::new(memory, 0x030C_01F0, 0).expect("3.12");
    assert_eq!(interpreter.string(0x1000).as_deref(), Some("a?b?cdefg"));
    let capped = interpreter.string(0x2000).expect("capped");
    assert_eq!(capped.chars().count(), MAX_CHARS + 1, "{MAX_CHARS} and an ellipsis");
    assert_eq!(interpreter.string(0x3000).as_deref(), Some("é☻"), "two bytes a character");
    assert_eq!(interpreter.string(0x4000), None, "not compact: not read");
    assert_eq!(interpreter.string(0x5000), None, "its characters are not all there");
}

fn frame(name: &str, entry: bool) -> PyFrame {
    PyFrame { name: name.to_owned(), entry }
}

#[test]
fn each_eval_loop_frame_becomes_the_python_frames_it_runs() {
    let native: Vec<String> = ["clock_nanosleep+0x23 (libc.so.6)", "time_sleep+0x5c (libpython3.11.so.1.0)"]
        .into_iter()
        .chain(["_PyEval_EvalFrameDefault+0x1 (libpython3.11.so.1.0)", "gen_send_ex2+0x2 (libpython3.11.so.1.0)"])
        .chain(["_PyEval_EvalFrameDefault+0x3 (libpython3.11.so.1.0)", "Py_RunMain+0x4 (libpython3.11.so.1.0)"])
        .map(str::to_owned)
        .collect();
    let python =
        vec![frame("handler (a.py:3)", false), frame("serve (a.py:5)", true), frame("<module> (a.py:7)", true)];
    assert_eq!(
        merge(native.clone(), python.clone()),
        [
            "clock_nanosleep+0x23 (libc.so.6)",
            "time_sleep+0x5c (libpython3.11.so.1.0)",
            "handler (a.py:3)",
            "serve (a.py:5)",
            "gen_send_ex2+0x2 (libpython3.11.so.1.0)",
            "<module> (a.py:7)",
            "Py_RunMain+0x4 (libpython3.11.so.1.0)",
        ]
    );
    // The native unwind stopped in the first eval call: the outer Python frames follow.
    let short = merge(native[..3].to_vec(), python.clone());
    assert_eq!(&short[2..], ["handler (a.py:3)", "serve (a.py:5)", "<module> (a.py:7)"]);
    assert_eq!(merge(native.clone(), Vec::new()), native, "no Python frames: the native stack as it was");
}

#[test]
fn files_show_their_name_and_a_packages_init_its_package() {
    for (path, shown) in [
        ("/usr/lib/python3.11/asyncio/base_events.py", "base_events.py"),
        ("/srv/app/handlers/__init__.py", "handlers/__init__.py"),
        ("<string>", "<string>"),
        ("/__main__.py", "__main__.py"),
    ] {
        assert_eq!(short_file(path), shown);
    }
}

/// A CPython child, killed when the test ends, also when it fails.
struct PythonChild(Child);

impl Drop for PythonChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `python` running blocked.py, once it said it is about to block; `None` if this machine has
/// no such `python`.
fn blocked_py(python: &str) -> Option<PythonChild> {
    if !Path::new(python).exists() {
        eprintln!("{python} not here: skipped");
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/stacks/python/testdata/blocked.py");
    let mut child =
        PythonChild(Command::new(python).arg(&script).stdout(Stdio::piped()).spawn().expect("start python"));
    let mut ready = String::new();
    BufReader::new(child.0.stdout.take().expect("stdout")).read_line(&mut ready).expect("ready line");
    assert_eq!(ready.trim(), "ready");
    Some(child)
}

/// The CPythons a live test walks: pyenv's builds (shared libpython, symbols kept) and Debian's
/// stripped static 3.11, with their minor versions.
const PYTHONS: [(&str, u32); 4] = [
    ("/root/.pyenv/versions/3.11.7/bin/python3.11", 11),
    ("/root/.pyenv/versions/3.12.1/bin/python3.12", 12),
    ("/root/.pyenv/versions/3.13.0/bin/python3.13", 13),
    ("/usr/bin/python3.11", 11),
];

/// A real CPython's main thread asleep in `handler`, walked in its memory (root, or the
/// child's parent under Yama's default), for each interpreter of [`PYTHONS`] on this machine
/// (3.13's layout from its own `_Py_DebugOffsets`). One missing is said loudly and skipped; a
/// 3.11 must be here.
#[test]
fn a_live_cpythons_frames() {
    let mut walked = Vec::new();
    for (python, minor) in PYTHONS {
        let Some(child) = blocked_py(python) else {
            eprintln!("!!! CPython 3.{minor} NOT TESTED: {python} is not on this machine");
            continue;
        };
        let pid = child.0.id();
        let mut symbolizer = crate::symbolize::Symbolizer::default();
        let image = symbolizer.image(pid);
        let (version, runtime) = symbolizer.python_runtime(&image).unwrap_or_else(|| panic!("{python}: no _PyRuntime"));
        assert_eq!((version >> 16) & 0xff, minor, "{python}: {version:#x}");
        // The thread may not be in handler's sleep yet.
        let deadline = Instant::now() + Duration::from_secs(5);
        let (frames, reads) = loop {
            let recorder = Recorder { process: Process(pid), reads: RefCell::default() };
            let mut interpreter = Interpreter::new(recorder, version, runtime).expect("a known version");
            let frames = interpreter.frames(pid);
            if frames.first().is_some_and(|f| f.name.starts_with("handler")) || Instant::now() > deadline {
                break (frames, interpreter.memory.reads.into_inner());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_blocked_py(&frames, minor);
        walked.push(minor);
        if std::env::var_os("PYTHON_FRAMES_RECORD").is_some() && python.contains("3.11.7") {
            let path =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("src/stacks/python/testdata/cpython-3.11.7-blocked.txt");
            std::fs::write(&path, recording_text(version, runtime, pid, &reads)).expect("write the recording");
        }
    }
    let walked_names: Vec<String> = walked.iter().map(|minor| format!("3.{minor}")).collect();
    eprintln!("CPython frames walked live: {}", walked_names.join(", "));
    assert!(walked.contains(&11), "no CPython 3.11 here (pyenv's 3.11.7 or Debian's): the case that must run");
}

/// The median of `runs` timed calls of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

/// The worker's whole answer for a CPython thread (`stacks_of`): native frames from the unwind
/// with the Python frames where the eval loop's were; and what the Python walk adds to it, files
/// parsed (as for every stack after a process's first).
#[test]
fn a_cpython_threads_stack_has_its_python_frames_and_what_they_cost() {
    let Some(child) = blocked_py("/root/.pyenv/versions/3.11.7/bin/python3.11") else { return };
    let pid = child.0.id();
    let mut symbolizer = crate::symbolize::Symbolizer::with_unwind_tables();
    let mut unwinder = crate::stacks::unwind::Unwinder::default();
    let deadline = Instant::now() + Duration::from_secs(5);
    let stack = loop {
        match crate::stacks::stacks_of(&mut symbolizer, &mut unwinder, pid, &[pid]).pop() {
            Some((_, Ok((_, frames)))) if frames.iter().any(|f| f.starts_with("handler (")) => break frames,
            other => assert!(Instant::now() < deadline, "no Python frames yet: {other:#?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let at = |name: &str| stack.iter().position(|f| f.starts_with(name));
    let order = [at("clock_nanosleep"), at("time_sleep"), at("handler (blocked.py:3)"), at("serve (blocked.py:5)")];
    assert!(order.iter().all(Option::is_some) && order.is_sorted(), "{stack:#?}");
    assert_eq!(at("<module> (blocked.py:7)").map(|m| m > at("serve").unwrap_or(0)), Some(true), "{stack:#?}");
    assert_eq!(at("_PyEval_EvalFrameDefault"), None, "every eval loop frame replaced: {stack:#?}");
    let whole = median(21, || {
        std::hint::black_box(crate::stacks::stacks_of(&mut symbolizer, &mut unwinder, pid, &[pid]));
    });
    let image = symbolizer.image(pid);
    let (version, runtime) = symbolizer.python_runtime(&image).expect("a CPython");
    let walk = median(21, || {
        let frames = Interpreter::new(Process(pid), version, runtime).map(|mut i| i.frames(pid));
        std::hint::black_box(frames);
    });
    let python_frames = stack.iter().filter(|f| f.contains(".py:")).count();
    eprintln!(
        "PYTHON_STACK_COST stack of {} frames ({python_frames} Python): {whole:?} in all, {walk:?} of it the Python walk (medians of 21)",
        stack.len()
    );
}
