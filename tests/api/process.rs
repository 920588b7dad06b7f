//! questd as a process of its own (the built binary), for what a server
//! inside the test cannot show: a SIGKILL, and a database on a filesystem
//! of its own that fills up.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use crate::common::{Api, TEST_KEY, TEST_NODE};
use serde_json::Value;

/// The shell that holds a small filesystem for questd: it mounts a tmpfs
/// of `$2` MiB at `$1`, runs questd (the rest of the arguments) on it in the
/// background, says questd's pid on stdout (a SIGKILL must reach questd,
/// not this shell), and once questd has ended, however it ended, copies the
/// filesystem's files to `$3`: the tmpfs is gone with the namespace, and
/// the copy is the disk a restarted questd finds.
const SMALL_FS: &str = r#"set -e
dir=$1 mib=$2 out=$3
shift 3
mount -t tmpfs -o size="${mib}m" questd-small-fs "$dir"
"$@" 2>/dev/null &
questd=$!
echo "{\"questd_pid\": $questd}"
wait "$questd" || true
cp -a "$dir"/. "$out"/
"#;

/// A questd process on a database file, with the port it bound.
pub struct Server {
    /// questd itself, or the shell that holds its small filesystem.
    child: Child,
    /// questd's process id.
    pid: u32,
    base: String,
    port: u16,
    /// The last lines questd logged, shown when a test fails.
    log: Log,
}

/// The last [`LOG_LINES`] lines a questd process logged.
type Log = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// How many of a process's last log lines a failed test shows.
const LOG_LINES: usize = 300;

/// Reads `lines` to their end on a thread of its own, keeping the last
/// [`LOG_LINES`] in `log`.
fn keep(lines: impl Iterator<Item = std::io::Result<String>> + Send + 'static, log: &Log) {
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
            if kept.len() == LOG_LINES {
                kept.pop_front();
            }
            kept.push_back(line);
        }
    });
}

impl Api for Server {
    fn base(&self) -> &str {
        &self.base
    }

    fn port(&self) -> u16 {
        self.port
    }
}

/// `questd serve` on `db`, bound to `bind` (`127.0.0.1:0`: a free port),
/// logging JSON (which the port is read from): the program, then its
/// arguments.
fn serve<'a>(db: &'a str, bind: &'a str) -> [&'a str; 8] {
    [
        env!("CARGO_BIN_EXE_questd"),
        "serve",
        "--bind",
        bind,
        "--log-format",
        "json",
        "--database-url",
        db,
    ]
}

impl Server {
    pub fn start(db: &str) -> Self {
        Self::start_with(db, &[])
    }

    /// Starts with these extra environment variables.
    pub fn start_with(db: &str, env: &[(&str, &str)]) -> Self {
        Self::start_on(db, "127.0.0.1:0", env)
    }

    /// Starts bound to `bind` (e.g. a port chosen before, that a proxy in
    /// front of this node forwards to).
    pub fn start_on(db: &str, bind: &str, env: &[(&str, &str)]) -> Self {
        let [program, args @ ..] = serve(db, bind);
        let mut command = Command::new(program);
        command.args(args).stderr(Stdio::piped());
        Self::spawn(command, env, None)
    }

    /// Starts with its database (`questd.db`) in `dir`, on a tmpfs of `mib`
    /// MiB mounted there in a user and mount namespace of its own (so no
    /// privilege is needed and nothing outside sees it): its writes fail as
    /// on a real full disk, in the WAL and database files alike. When
    /// questd ends, the files are copied to `copy_to`, where a questd with
    /// room can open them. Fails the test if the namespace or the mount
    /// cannot be made: a test of a full disk that runs without one proves
    /// nothing.
    pub fn start_on_small_fs(dir: &Path, mib: u32, copy_to: &Path, env: &[(&str, &str)]) -> Self {
        let db = crate::database::sqlite_url_in(dir);
        let mut command = Command::new("unshare");
        command
            .args(["--user", "--map-root-user", "--mount", "sh", "-c", SMALL_FS])
            .args(["sh", &dir.display().to_string(), &mib.to_string()])
            .arg(copy_to)
            .args(serve(&db, "127.0.0.1:0"))
            .stderr(Stdio::piped());
        Self::spawn(
            command,
            env,
            Some("`unshare --user --map-root-user --mount` with a tmpfs for questd's database"),
        )
    }

    /// Runs `command` and waits for the port questd logs: questd itself,
    /// or `around` it a shell that says questd's pid (named in failures).
    fn spawn(mut command: Command, env: &[(&str, &str)], around: Option<&str>) -> Self {
        let what = around.unwrap_or("questd");
        // One name across restarts, as an operator gives a node: a node
        // killed and started again takes its sessions back at once instead
        // of waiting out its old lease (PostgreSQL).
        let mut child = command
            .env("QUESTD_NODE_ID", TEST_NODE)
            // As `common::settings_in`: tests play faster than a person.
            .env("QUESTD_WS_FRAMES_PER_SECOND", "100000")
            .env("QUESTD_WS_FRAME_BURST", "100000")
            .envs(env.iter().copied())
            .env("QUESTD_INTERNAL_API_KEY", TEST_KEY)
            .env("QUESTD_LOG", "info")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} cannot start: {e}"));
        let mut pid = around.is_none().then(|| child.id());
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut port = None;
        let mut said = Vec::new();
        let (pid, port) = loop {
            if let (Some(pid), Some(port)) = (pid, port) {
                break (pid, port);
            }
            let Some(line) = lines.next() else {
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut stderr);
                }
                let status = child.wait().expect("reaped");
                let said = said.join("\n");
                panic!("{what} ended ({status}) before questd logged its port: {stderr}{said}");
            };
            let line = line.expect("log line");
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            said.push(line);
            if let Some(p) = v["questd_pid"].as_u64() {
                pid = Some(p as u32);
            }
            if let Some(p) = v["fields"]["port"].as_u64() {
                port = Some(p as u16);
            }
        };
        // Keep draining logs so the process never blocks on a full pipe;
        // the last ones are kept for a failed test to show.
        let log = Log::default();
        keep(lines, &log);
        if let Some(stderr) = child.stderr.take() {
            keep(BufReader::new(stderr).lines(), &log);
        }
        Self {
            child,
            pid,
            base: format!("http://127.0.0.1:{port}"),
            port,
            log,
        }
    }

    /// Stops questd with SIGKILL and waits for the process the test
    /// started; answers how that ended (for a small filesystem: whether
    /// its files were copied out).
    pub fn kill9(mut self) -> ExitStatus {
        assert!(sigkill(self.pid), "kill -9 {}", self.pid);
        self.child.wait().expect("reaped")
    }
}

impl Server {
    /// Sends questd a signal (`STOP`, `CONT`, `TERM`, ...).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {}", self.pid);
    }

    /// Waits for questd to end by itself; answers how it ended.
    pub fn wait(mut self) -> ExitStatus {
        self.child.wait().expect("reaped")
    }
}

/// Sends SIGKILL to `pid`; answers whether it was sent.
fn sigkill(pid: u32) -> bool {
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!(
                "--- the last {} lines questd on port {} logged:",
                log.len(),
                self.port
            );
            for line in log.iter() {
                eprintln!("{line}");
            }
        }
        // questd outlives the shell around it: end it first.
        if let Ok(None) = self.child.try_wait() {
            sigkill(self.pid);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
