//! Usage errors: one line on stderr, exit code 2. No privileges needed.

use std::process::Command;

use tests::binary;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(binary("gateway-observer")).args(args).output().expect("run gateway-observer");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_one_line_exit_2(args: &[&str], needle: &str) {
    let (code, stderr) = run(args);
    assert_eq!(code, 2, "{args:?}: exit {code}, stderr {stderr:?}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: not one line: {stderr:?}");
    assert!(stderr.contains(needle), "{args:?}: {stderr:?} does not mention {needle:?}");
}

#[test]
fn bad_flags_are_one_line_and_exit_2() {
    assert_one_line_exit_2(&["run", "--target", "pid=abc"], "pid must be a positive number");
    assert_one_line_exit_2(&["run", "--target", "uid=1"], "unknown kind");
    assert_one_line_exit_2(&["run", "--bogus"], "--bogus");
    assert_one_line_exit_2(&["run", "--target", "pid=1", "--interval", "soon"], "soon");
    assert_one_line_exit_2(&["run"], "no target");
}

#[test]
fn an_unreachable_target_is_one_line_and_exit_2() {
    let mut gone = Command::new("true").spawn().expect("spawn true");
    let pid = gone.id();
    gone.wait().expect("reap");
    assert_one_line_exit_2(&["run", "--target", &format!("pid={pid}")], "no such process");
}

#[test]
fn garbage_config_names_the_problem() {
    let dir = std::env::temp_dir().join(format!("go-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bad.toml");
    std::fs::write(&path, "listne = \"127.0.0.1:1\"\n").expect("write config");
    assert_one_line_exit_2(&["run", "--config", path.to_str().expect("utf-8"), "--target", "pid=1"], "listne");
    let token = dir.join("token");
    std::fs::write(&token, "short\n").expect("write token");
    let token = token.to_str().expect("utf-8");
    assert_one_line_exit_2(&["run", "--target", "pid=1", "--api-token-file", token], "at least 16 characters");
    assert_one_line_exit_2(&["run", "--target", "pid=1", "--api-token-file", "/nonexistent/token"], "cannot read");
    let _ = std::fs::remove_dir_all(&dir);
}
