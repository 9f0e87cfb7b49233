//! The guest's whole filesystem, as an initramfs: busybox-static and its applets, the daemon (its
//! debug info stripped), the host's `openssl` command twice (as `kt-tlsd`, a TLS server the
//! daemon targets, and as its client) with a certificate made here, the shared libraries `ldd`
//! names for both (Debian's `libssl3` among them: `check` hooks it, so each kernel's verifier
//! judges the TLS programs), each kernel's `tls.ko` and the AES-GCM modules it asks for (a third
//! copy of `openssl`, `kt-ktlsd`, and Debian's nginx serve HTTPS with kernel TLS; nginx's
//! configuration, and the `/etc/passwd` and `/etc/group` it looks root up in), the fixtures, and
//! `guest/init.sh` as `/init`. No root filesystem: the kernel unpacks this into RAM and runs `/init`.
//!
//! Left uncompressed: gzip would cost time both here and in the guest, where TCG makes
//! decompression slow, and the kernel takes a plain cpio archive as well.

use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::{fixtures::guest_dir, kernels::Kernel};
use crate::util::output;

/// What Debian's busybox-static installs: statically linked, so it needs nothing beside it.
const BUSYBOX: &str = "/bin/busybox";
/// Debian's `openssl` command.
const OPENSSL: &str = "/usr/bin/openssl";
/// Debian's nginx, a gateway terminating TLS with kernel TLS in the guest.
const NGINX: &str = "/usr/sbin/nginx";

/// Builds `dir/root` and packs it into `dir/initrd.cpio`, which it returns.
pub fn build(daemon: &Path, fixtures: &[PathBuf], kernels: &[Kernel], dir: &Path) -> anyhow::Result<PathBuf> {
    let root = dir.join("root");
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("cannot clear {}", root.display()))?;
    }
    for sub in ["bin", "dev", "proc", "sys", "tmp", "run", "usr/lib", "usr/lib64"] {
        mkdir(&root.join(sub))?;
    }
    // Merged /usr, as Debian's: `ldd` names libraries under /lib, where `check` does not look.
    for dir in ["lib", "lib64"] {
        std::os::unix::fs::symlink(format!("usr/{dir}"), root.join(dir)).context("cannot link /lib to /usr/lib")?;
    }
    busybox(&root)?;
    let bin = root.join("bin");
    strip_into(daemon, &bin.join("gateway-observer"))?;
    tls_server(&root)?;
    for kernel in kernels {
        // Numbered, so that the guest's glob loads them in order.
        let modules = root.join("usr/lib/modules").join(kernel.release());
        mkdir(&modules)?;
        for (i, module) in kernel.tls_modules.iter().enumerate() {
            let name = module.file_name().context("a module without a name")?.to_string_lossy();
            copy(module, &modules.join(format!("{i}-{name}")))?;
        }
    }
    nginx(&root)?;
    let libraries =
        [shared_libraries(daemon)?, shared_libraries(Path::new(OPENSSL))?, shared_libraries(Path::new(NGINX))?];
    for library in libraries.into_iter().flatten() {
        let inside = root.join(library.strip_prefix("/").unwrap_or(&library));
        mkdir(inside.parent().unwrap_or(&root))?;
        copy(&library, &inside)?;
    }
    for fixture in fixtures {
        copy(fixture, &bin.join(fixture.file_name().context("a fixture without a name")?))?;
    }
    let init = root.join("init");
    copy(&guest_dir().join("init.sh"), &init)?;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).context("cannot make /init executable")?;
    let archive = dir.join("initrd.cpio");
    pack(&root, &archive)?;
    Ok(archive)
}

/// busybox in /bin, with a link for each of its applets (sh, mount, wget, poweroff…).
fn busybox(root: &Path) -> anyhow::Result<()> {
    let bin = root.join("bin");
    copy(Path::new(BUSYBOX), &bin.join("busybox"))?;
    let applets = output(BUSYBOX, &["--list"]).context("busybox --list failed: is busybox-static installed?")?;
    // `busybox` is in its own list: linking it would replace the binary by a link to itself.
    for applet in applets.lines().filter(|a| !a.is_empty() && *a != "busybox") {
        std::os::unix::fs::symlink("busybox", bin.join(applet))
            .with_context(|| format!("cannot link the applet {applet}"))?;
    }
    Ok(())
}

/// The daemon without its debug info (a tenth of the size), or as it is when strip is missing.
fn strip_into(binary: &Path, dest: &Path) -> anyhow::Result<()> {
    let stripped = Command::new("strip").arg("--strip-debug").arg("-o").arg(dest).arg(binary).status();
    if stripped.is_ok_and(|s| s.success()) {
        return Ok(());
    }
    copy(binary, dest)
}

/// The absolute paths `ldd` prints for a binary, the dynamic loader included.
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let binary = binary.to_str().context("a binary's path is not UTF-8")?;
    let listing = output("ldd", &[binary]).with_context(|| format!("ldd failed on {binary}"))?;
    let libraries: Vec<PathBuf> = listing
        .lines()
        .filter_map(|line| line.split_whitespace().find(|word| word.starts_with('/')))
        .map(PathBuf::from)
        .collect();
    if libraries.is_empty() {
        bail!("ldd names no library for {binary}: expected at least libc and the loader");
    }
    Ok(libraries)
}

/// nginx terminating TLS 1.2 with kernel TLS on `NGINX_KTLS_PORT` (init.sh), proxying to
/// kt-httpd over keep-alive HTTP/1.1; as root (the guest has no other user), everything under /tmp.
const NGINX_CONFIG: &str = "daemon off;
master_process on;
worker_processes 1;
user root root;
pid /tmp/nginx.pid;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path /tmp;
    proxy_temp_path /tmp;
    fastcgi_temp_path /tmp;
    uwsgi_temp_path /tmp;
    scgi_temp_path /tmp;
    upstream kt_httpd { server 127.0.0.1:8080; keepalive 4; }
    server {
        listen 127.0.0.1:8445 ssl;
        ssl_certificate /etc/kt/cert.pem;
        ssl_certificate_key /etc/kt/key.pem;
        ssl_protocols TLSv1.2;
        ssl_conf_command Options KTLS;
        location / {
            proxy_pass http://kt_httpd;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }
    }
}
";

/// nginx as `/bin/nginx`, its configuration, and the user and group it looks root up in.
fn nginx(root: &Path) -> anyhow::Result<()> {
    copy(Path::new(NGINX), &root.join("bin/nginx")).context("is nginx installed (cargo xtask setup)?")?;
    let etc = root.join("etc");
    mkdir(&etc.join("kt"))?;
    std::fs::write(etc.join("kt/nginx.conf"), NGINX_CONFIG).context("cannot write nginx.conf")?;
    std::fs::write(etc.join("passwd"), "root:x:0:0:root:/:/bin/sh\n").context("cannot write /etc/passwd")?;
    std::fs::write(etc.join("group"), "root:x:0:\n").context("cannot write /etc/group")
}

/// OpenSSL's configuration for `kt-ktlsd` (`OPENSSL_CONF`, `s_server -ssl_config ktls`): its
/// `KTLS` option hands each session's keys to the kernel once the handshake is done.
const KTLS_CONFIG: &str = "openssl_conf = init\n[init]\nssl_conf = ssl_module\n[ssl_module]\nktls = ktls_options\n[ktls_options]\nOptions = KTLS\n";

/// `openssl s_server -www` is the guest's TLS server: OpenSSL's own code answers the requests, and
/// a copy named `kt-tlsd` gives it a name of its own to target (`openssl` is also the client).
/// Its key and self-signed certificate are made here: P-256, quick to use under TCG.
fn tls_server(root: &Path) -> anyhow::Result<()> {
    let bin = root.join("bin");
    copy(Path::new(OPENSSL), &bin.join("kt-tlsd"))?;
    copy(Path::new(OPENSSL), &bin.join("kt-ktlsd"))?;
    copy(Path::new(OPENSSL), &bin.join("kt-ktls13"))?;
    copy(Path::new(OPENSSL), &bin.join("openssl"))?;
    let dir = root.join("etc/kt");
    mkdir(&dir)?;
    std::fs::write(dir.join("ktls.cnf"), KTLS_CONFIG).context("cannot write the kTLS server's OpenSSL config")?;
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let status = Command::new(OPENSSL)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-subj", "/CN=kt-tlsd", "-days", "2", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .context("cannot run openssl: is it installed (cargo xtask setup)?")?;
    anyhow::ensure!(status.success(), "openssl could not make the guest's certificate ({status})");
    Ok(())
}

/// `find . | cpio -o -H newc`, the format the kernel unpacks.
fn pack(root: &Path, archive: &Path) -> anyhow::Result<()> {
    let archive_file =
        std::fs::File::create(archive).with_context(|| format!("cannot create {}", archive.display()))?;
    let status = Command::new("sh")
        .args(["-c", "find . -print0 | cpio --null --create --format=newc --quiet"])
        .current_dir(root)
        .stdout(archive_file)
        .status()
        .context("failed to run find | cpio")?;
    anyhow::ensure!(status.success(), "packing the initramfs failed ({status}): is cpio installed?");
    Ok(())
}

fn mkdir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// Copies file contents (following links: the guest gets real files).
fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::copy(from, to).map(drop).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
}
