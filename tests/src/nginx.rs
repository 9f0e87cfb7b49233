//! Debian's nginx run from a temp dir with a config the test writes: as a reverse proxy under
//! observation, or as a static upstream (inside a network namespace).

use std::{
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::{temp_dir, wait_until};

pub struct Nginx {
    pub child: Child,
}

impl Nginx {
    /// Starts nginx (master + `workers` workers, no daemon) with `http_body` inside `http {}`,
    /// through `prefix` (e.g. `ip netns exec NS`), and waits until `probe` accepts connections.
    pub fn start(prefix: &[&str], workers: u32, http_body: &str, probe: (&str, u16)) -> Nginx {
        let dir = temp_dir("nginx");
        let conf = format!(
            "worker_processes {workers};\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\nevents {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n  fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n{http_body}\n}}\n",
            dir = dir.display()
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).expect("write nginx.conf");
        let (program, args) = match prefix.split_first() {
            Some((first, rest)) => {
                (first.to_string(), rest.iter().map(|s| s.to_string()).chain([binary().to_owned()]).collect())
            }
            None => (binary().to_owned(), Vec::new()),
        };
        let child = Command::new(program)
            .args(args)
            .args(["-p", &dir.display().to_string(), "-c", &path.display().to_string(), "-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx (cargo xtask setup installs it)");
        let (host, port) = probe;
        wait_until("nginx to listen", Duration::from_secs(10), || TcpStream::connect((host, port)).is_ok());
        Nginx { child }
    }

    /// nginx as a reverse proxy on 127.0.0.1:`port` with 2 workers: `locations` inside its server.
    pub fn proxy(port: u16, upstreams: &str, locations: &str) -> Nginx {
        let body = format!("{upstreams}\n  server {{\n    listen 127.0.0.1:{port};\n{locations}\n  }}");
        Self::start(&[], 2, &body, ("127.0.0.1", port))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

fn binary() -> &'static str {
    if Path::new("/usr/sbin/nginx").exists() { "/usr/sbin/nginx" } else { "nginx" }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: our child's pid and a valid signal; SIGTERM makes nginx stop its workers too.
        // (Behind `ip netns exec`, the child is nginx itself: exec replaces the wrapper.)
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
