use super::*;

#[test]
fn maps_and_perf_map_lines() {
    let maps = parse_maps(
        "55d0c0000000-55d0c0100000 r-xp 00002000 fd:00 12 /usr/bin/java\n\
         7f00-7f10 rw-p 00000000 00:00 0 [heap]\n\
         7f20-7f30 r-xp 00000000 00:00 0 \n",
    );
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].file_offset, 0x2000);
    let perf = parse_perf_map("7f1234 40 Lio/netty/Foo;::bar\nnot a line\n");
    assert_eq!(perf, vec![(0x7f1234, 0x40, "Lio/netty/Foo;::bar".to_owned())]);
}

#[test]
fn jit_code_is_the_perf_maps_ranges_sorted_and_merged() {
    // V8's lines (node 20): a reused range listed twice, an overlap, an empty entry, one at the top.
    let perf_map = Arc::new(parse_perf_map(
        "7f585c005e00 160 JS:*block [eval]:1:15\n\
         7f585c005900 104 JS:^block [eval]:1:15\n\
         7f585c005900 104 JS:^other [eval]:2:1\n\
         7f585c005980 100 JS:~x [eval]:3:1\n\
         19aca00 0 Builtin:Empty\n\
         ffffffffffffff00 1000 Ltop;\n",
    ));
    let image = Image { perf_map, ..Image::default() };
    assert_eq!(
        image.jit_code(),
        [0x7f58_5c00_5900..0x7f58_5c00_5a80, 0x7f58_5c00_5e00..0x7f58_5c00_5f60, 0xffff_ffff_ffff_ff00..u64::MAX]
    );
}

/// Found by fuzzing (symbols, elf_symbols): ranges that reach the top of the address space
/// overflowed their end, a panic in debug builds. The perf map and the ELF file are the
/// target's to write.
#[test]
fn ranges_up_to_the_top_of_the_address_space() {
    let perf = parse_perf_map("ffffffffffffff00 1000 Ltop;\n");
    assert_eq!(jit_name(0xffff_ffff_ffff_ff10, &perf).as_deref(), Some("Ltop;+0x10 [jit]"));
    assert_eq!(jit_name(0xff, &perf), None);
    let mapping =
        Mapping { start: 0x1000, end: 0x3000, file_offset: u64::MAX - 0x10, path: PathBuf::from("/usr/lib/libgw.so") };
    let elf = ElfSymbols {
        symbols: vec![(0x400, u64::MAX, "huge".to_owned()), (u64::MAX - 4, 8, "last".to_owned())],
        segments: vec![(0, u64::MAX, 0x400)],
        unwind: None,
        python: None,
    };
    assert_eq!(name(0x1020, 0x1020, &mapping, Some(&elf)), "libgw.so+?", "the file offset overflows");
    let mapping = Mapping { file_offset: 0, ..mapping };
    assert_eq!(name(0x1010, 0x1010, &mapping, Some(&elf)), "huge+0x10 (libgw.so)");
    assert_eq!(name(0x1010, 0x100f, &mapping, Some(&elf)), "huge+0x10 (libgw.so)", "looked up a byte back");
    assert_eq!(name(0x1000, 0x0fff, &mapping, Some(&elf)), "huge+0x0 (libgw.so)", "never before the mapping");
    // lld's layout (reference-gateway): the text segment starts 0x860 into the page that ends
    // the read-only segment; its mapping starts at that page.
    let lld = ElfSymbols {
        symbols: Vec::new(),
        segments: vec![(0, 0x1c_0854, 0), (0x1c_0860, 0x34_8040, 0x1c_1860)],
        unwind: None,
        python: None,
    };
    assert_eq!(lld.vaddr_at_mapping(0x1c_0000), Some(0x1c_1000), "the text segment's page");
    assert_eq!(lld.vaddr_of_offset(0x1c_0000), Some(0x1c_0000), "by offset alone: the read-only segment");
    let top =
        ElfSymbols { symbols: Vec::new(), segments: vec![(u64::MAX - 8, 8, u64::MAX - 8)], unwind: None, python: None };
    assert_eq!(top.vaddr_of_offset(u64::MAX - 1), Some(u64::MAX - 1));
    let past = ElfSymbols {
        symbols: Vec::new(),
        segments: vec![(0x10, u64::MAX - 0x10, u64::MAX)],
        unwind: None,
        python: None,
    };
    assert_eq!(past.vaddr_of_offset(0x20), None, "a segment whose addresses run past the top");
}

#[inline(never)]
fn a_function_to_find() -> u64 {
    std::hint::black_box(42)
}

#[test]
fn names_a_function_of_this_test_binary() {
    let ip = a_function_to_find as *const () as u64 + 4;
    let mut s = Symbolizer::default();
    let names = s.symbolize(std::process::id(), &[ip]);
    assert!(names[0].contains("a_function_to_find"), "{names:?}");
    let unknown = s.symbolize(std::process::id(), &[8]);
    assert_eq!(unknown[0], "[unknown]", "no address leaves the host");
    let now = std::time::Instant::now();
    s.forget_unused(now, std::time::Duration::from_secs(30));
    assert!(!s.elves.is_empty(), "a file used just now is kept");
    s.forget_unused(now + std::time::Duration::from_secs(31), std::time::Duration::from_secs(30));
    assert!(s.elves.is_empty() && s.perf_maps.is_empty(), "a file unused for 30 s is dropped");
    let again = s.symbolize(std::process::id(), &[ip]);
    assert_eq!(again, names, "and parsed again when asked");
}

/// A process to symbolize and its /tmp/perf-PID.map, both gone on drop.
struct Target {
    child: std::process::Child,
    perf_map: PathBuf,
}

impl Target {
    fn start() -> Target {
        let child = std::process::Command::new("sleep").arg("60").spawn().expect("spawn sleep");
        let perf_map = PathBuf::from(format!("/tmp/perf-{}.map", child.id()));
        let _ = std::fs::remove_file(&perf_map);
        Target { child, perf_map }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.perf_map);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `symbolize` on a thread of its own, so that a stall fails the test instead of hanging it.
fn symbolize_within(s: Symbolizer, pid: u32, ips: Vec<u64>) -> (Symbolizer, Vec<String>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut s = s;
        let names = s.symbolize(pid, &ips);
        let _ = tx.send((s, names));
    });
    rx.recv_timeout(std::time::Duration::from_secs(5)).expect("symbolize stalled for 5 s")
}

#[test]
fn a_fifo_as_perf_map_neither_stalls_nor_is_read() {
    let target = Target::start();
    let path = std::ffi::CString::new(target.perf_map.to_string_lossy().into_owned()).expect("path");
    // SAFETY: a NUL-terminated path of ours.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o666) }, 0, "mkfifo");
    let (s, names) = symbolize_within(Symbolizer::default(), target.pid(), vec![0x1000]);
    assert_eq!(names, vec!["[unknown]"]);
    assert_eq!(s.refusals().get("not_regular"), Some(&1), "{:?}", s.refusals());
}

#[test]
fn a_perf_map_is_parsed_once_per_identity() {
    let target = Target::start();
    std::fs::write(&target.perf_map, "1000 40 Lfirst;\n").expect("write");
    let (s, names) = symbolize_within(Symbolizer::default(), target.pid(), vec![0x1010]);
    assert_eq!(names, vec!["Lfirst;+0x10 [jit]"]);
    // The same bytes count, inode and mtime: the parsed map is kept, the file not read again.
    let mtime = std::fs::metadata(&target.perf_map).and_then(|m| m.modified()).expect("mtime");
    std::fs::write(&target.perf_map, "1000 40 Lother;\n").expect("rewrite");
    std::fs::File::options().write(true).open(&target.perf_map).and_then(|f| f.set_modified(mtime)).expect("touch");
    let (s, names) = symbolize_within(s, target.pid(), vec![0x1010]);
    assert_eq!(names, vec!["Lfirst;+0x10 [jit]"], "re-read although unchanged");
    // A new size is a new file.
    std::fs::write(&target.perf_map, "1000 40 Lchanged;\n").expect("rewrite");
    let (_, names) = symbolize_within(s, target.pid(), vec![0x1010]);
    assert_eq!(names, vec!["Lchanged;+0x10 [jit]"]);
}

#[test]
fn a_strangers_or_a_huge_perf_map_is_refused() {
    let target = Target::start();
    let file = std::fs::File::create(&target.perf_map).expect("create");
    // Sparse: a terabyte that takes no disk, and would take the daemon for ever to read.
    file.set_len(1 << 40).expect("set_len");
    let (s, names) = symbolize_within(Symbolizer::default(), target.pid(), vec![0x1000]);
    assert_eq!(names, vec!["[unknown]"]);
    assert_eq!(s.refusals().get("too_large"), Some(&1), "{:?}", s.refusals());
    file.set_len(0).expect("truncate");
    std::fs::write(&target.perf_map, "1000 40 Lplanted;\n").expect("write");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot give the perf map to another user; owner check not run");
        return;
    }
    std::os::unix::fs::chown(&target.perf_map, Some(54_321), None).expect("chown");
    let (s, names) = symbolize_within(s, target.pid(), vec![0x1010]);
    assert_eq!(names, vec!["[unknown]"], "a stranger's perf map was believed");
    assert_eq!(s.refusals().get("owner"), Some(&1), "{:?}", s.refusals());
}

/// An image parses only its executable at once, and a library when an address in it is asked
/// for: of the files this test binary maps, libc once one of its functions is, and never the
/// dynamic loader, which no frame here is in.
#[test]
fn a_file_is_parsed_when_an_address_in_it_is_first_asked_for() {
    let mut s = Symbolizer::with_unwind_tables();
    let mut image = s.image(std::process::id());
    let name = |image: &Image, wanted: &str| {
        let parsed: Vec<String> = image
            .maps
            .iter()
            .zip(&image.files)
            .filter(|(_, file)| matches!(file, MappedFile::Parsed(_)))
            .map(|(m, _)| m.path.to_string_lossy().into_owned())
            .collect();
        (parsed.iter().any(|p| p.contains(wanted)), parsed)
    };
    assert!(image.maps.iter().any(|m| m.path.to_string_lossy().contains("libc.so")), "{:?}", image.maps);
    let (libc, parsed) = name(&image, "libc.so");
    assert!(!libc && parsed.len() == 1, "only the executable at first: {parsed:?}");
    let getpid = libc::getpid as *const () as u64;
    let (range, tables) = s.tables_at(&mut image, getpid).expect("getpid is in a mapping");
    assert!(range.contains(&getpid));
    assert!(tables.is_some_and(|t| t.tables.eh_frame.is_some()), "libc's unwind tables");
    let (libc, parsed) = name(&image, "libc.so");
    assert!(libc, "libc parsed once asked for: {parsed:?}");
    assert!(!name(&image, "ld-linux").0, "the loader is never parsed: {parsed:?}");
    assert!(s.tables_at(&mut image, 0x10).is_none(), "outside any mapping");
}
