//! The floor under fan-out on this host: what one burst of bytes to every
//! one of N loopback TCP connections costs with no WebSocket, no JSON and
//! no session, only the kernel's sends and reads and the least user space
//! around them. BENCHMARKS.md ("Fan-out", "The floor under it") sets
//! questd's fan-out beside it.
//!
//! ```sh
//! ulimit -n 25000
//! cargo run --release --example fanout_floor -- [CONNECTIONS] [BYTES] [BURSTS]
//! ```
//!
//! Defaults: 10,000 connections, 2,900 bytes a burst (a turn's ten frames
//! of the fan-out scenario, as one write per connection, as questd sends
//! them), 20 bursts a second apart (`questd loadtest --think-time 1s`).
//!
//! The sending side is two threads, each writing the burst to half of the
//! connections one after another (questd's two HTTP workers on two
//! cores); the reading side is a second process (this program again,
//! started with `--read`), a Tokio runtime of two workers with one task
//! per connection (as `questd loadtest` reads), so both share the host's
//! two cores as the server and the driver do. For each burst it reports
//! the time from the first connection having read the whole burst to the
//! last (the figure `questd loadtest` calls `fan_out_ms`), and the CPU
//! each side spent per burst (`/proc/thread-self/stat` of the senders,
//! `/proc/self/stat` of the reading process).

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map(|a| a.parse().expect("a whole number"))
        .unwrap_or(default)
}

/// CPU time (user + system) in clock ticks of `/proc/{path}/stat`.
fn cpu_ticks(path: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{path}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the line.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

const TICK_MS: f64 = 10.0;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--read") {
        return read();
    }
    let connections = arg(1, 10_000);
    let bytes = arg(2, 2_900);
    let bursts = arg(3, 20);
    let senders = 2;

    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr: SocketAddr = listener.local_addr().expect("its address");
    let exe = std::env::current_exe().expect("this program");
    let reader = std::process::Command::new(exe)
        .args(["--read", &addr.to_string()])
        .args([connections, bytes, bursts].map(|n| n.to_string()))
        .spawn()
        .expect("the reading process starts");
    let accepted: Vec<TcpStream> = (0..connections)
        .map(|_| {
            let (stream, _) = listener.accept().expect("accept");
            stream.set_nodelay(true).expect("nodelay");
            stream
        })
        .collect();

    // The senders: each its share of the connections, one burst per round.
    let payload = Arc::new(vec![b'x'; bytes]);
    let start = Arc::new(Barrier::new(senders + 1));
    let mut shares: Vec<Vec<TcpStream>> = (0..senders).map(|_| Vec::new()).collect();
    for (i, s) in accepted.into_iter().enumerate() {
        shares[i % senders].push(s);
    }
    let sending: Vec<_> = shares
        .into_iter()
        .map(|mut share| {
            let (payload, start) = (payload.clone(), start.clone());
            std::thread::spawn(move || {
                let before = cpu_ticks("thread-self");
                for _ in 0..bursts {
                    start.wait();
                    for s in &mut share {
                        s.write_all(&payload).expect("write");
                    }
                }
                let ticks = cpu_ticks("thread-self") - before;
                // Held open until the reader has read the last burst.
                (ticks, share)
            })
        })
        .collect();
    for _ in 0..bursts {
        std::thread::sleep(Duration::from_secs(1));
        start.wait();
    }
    let done: Vec<(u64, Vec<TcpStream>)> = sending
        .into_iter()
        .map(|t| t.join().expect("a sender"))
        .collect();
    let sender_ticks: u64 = done.iter().map(|(t, _)| t).sum();
    let status = reader.wait_with_output().expect("the reading process ends");
    assert!(status.status.success(), "the reading process failed");
    println!(
        "CPU per burst, ms: senders {:.1}",
        sender_ticks as f64 * TICK_MS / bursts as f64
    );
}

/// The reading side: connects, reads every burst on every connection,
/// and prints the spans and its CPU.
fn read() {
    let addr: SocketAddr = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .expect("an address");
    let connections = arg(3, 10_000);
    let bytes = arg(4, 2_900);
    let bursts = arg(5, 20);
    let readers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let began = Instant::now();
    let (before, arrivals): (u64, Vec<Vec<Instant>>) = readers.block_on(async {
        let mut streams = Vec::with_capacity(connections);
        for _ in 0..connections {
            let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
            s.set_nodelay(true).expect("nodelay");
            streams.push(s);
        }
        let before = cpu_ticks("self");
        // One task per connection: the instant it had read each whole burst.
        let tasks: Vec<_> = streams
            .into_iter()
            .map(|stream| {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut arrivals = Vec::with_capacity(bursts);
                    let mut have = 0usize;
                    while arrivals.len() < bursts {
                        if stream.readable().await.is_err() {
                            break;
                        }
                        match stream.try_read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                have += n;
                                while have >= bytes {
                                    have -= bytes;
                                    arrivals.push(Instant::now());
                                }
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(_) => break,
                        }
                    }
                    (arrivals, stream)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(tasks.len());
        // Every connection stays open until all have read the last burst:
        // closing each as it finishes would make the closes compete with
        // the others' reads of that burst, and the last burst's span would
        // measure the teardown.
        let mut open = Vec::with_capacity(tasks.len());
        for t in tasks {
            let (arrivals, stream) = t.await.expect("a reader");
            all.push(arrivals);
            open.push(stream);
        }
        drop(open);
        (before, all)
    });
    let ticks = cpu_ticks("self") - before;
    let elapsed = began.elapsed();

    let mut spans: Vec<f64> = (0..bursts)
        .filter_map(|b| {
            let times: Vec<Instant> = arrivals.iter().filter_map(|a| a.get(b).copied()).collect();
            let first = times.iter().min()?;
            let last = times.iter().max()?;
            Some(last.duration_since(*first).as_secs_f64() * 1000.0)
        })
        .collect();
    spans.sort_by(|a, b| a.total_cmp(b));
    let complete = arrivals.iter().filter(|a| a.len() == bursts).count();
    println!(
        "{connections} connections, {bytes} bytes a burst, {bursts} bursts over {:.1} s; {complete} read every burst",
        elapsed.as_secs_f64()
    );
    println!(
        "first to last reader, ms: p50 {:.1}, p90 {:.1}, p99 {:.1}, max {:.1}",
        percentile(&spans, 50.0),
        percentile(&spans, 90.0),
        percentile(&spans, 99.0),
        spans.last().copied().unwrap_or(0.0)
    );
    println!(
        "CPU per burst, ms: readers {:.1}",
        ticks as f64 * TICK_MS / bursts as f64
    );
}
