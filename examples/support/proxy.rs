//! A TCP proxy that injects network faults between a client and a server
//! (questd and PostgreSQL, or two nodes): pass every byte, refuse every
//! connection (the server down or restarting), hold every byte (a
//! blackhole: a partition, a frozen host), or cut the open connections.
//!
//! It runs on its own thread with its own runtime, so it keeps forwarding
//! while the thread that drives it blocks, and processes other than the
//! test's can talk through it.
// Tests and examples each include this file and use different parts of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with connections and bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward every byte both ways.
    Pass,
    /// Close every open connection and every new one at once: the server
    /// is down or restarting.
    Refuse,
    /// Accept new connections but forward no byte either way until
    /// `Pass` again: a blackhole. Held bytes stay in the kernel's buffers
    /// and flow on `Pass`, like a healed partition.
    Hold,
}

/// The proxy's state every connection watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    mode: Mode,
    /// Bumped by every cut (and every switch to `Refuse`): a connection
    /// opened under an earlier generation closes.
    generation: u64,
}

/// A running fault proxy on 127.0.0.1; dropping it stops it and closes
/// every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    state: watch::Sender<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream`,
    /// starting in `Mode::Pass`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (state, watch_state) = watch::channel(State {
            mode: Mode::Pass,
            generation: 0,
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = accept_loop(listener, upstream, watch_state) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime ends every connection task, which
                // closes their sockets.
            })?;
        Ok(FaultProxy {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode; `Refuse` also closes every open connection.
    pub fn set(&self, mode: Mode) {
        self.state.send_modify(|s| {
            s.mode = mode;
            if mode == Mode::Refuse {
                s.generation += 1;
            }
        });
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.state.borrow().mode
    }

    /// Closes every open connection now (a connection cut mid-request),
    /// then goes on in the current mode.
    pub fn cut(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, state: watch::Receiver<State>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors, say: wait rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let now = *state.borrow();
        if now.mode == Mode::Refuse {
            drop(client);
            continue;
        }
        tokio::spawn(connection(client, upstream, state.clone(), now.generation));
    }
}

/// One proxied connection: ends (closing both sockets) when both
/// directions end, or at once on a cut or `Refuse`.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    state: watch::Receiver<State>,
    generation: u64,
) {
    let _ = client.set_nodelay(true);
    let cut = {
        let mut state = state.clone();
        async move {
            let _ = state.wait_for(|s| s.generation != generation).await;
        }
    };
    let server = tokio::select! {
        server = TcpStream::connect(upstream) => server,
        _ = cut => return,
    };
    let Ok(server) = server else { return };
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let both = async {
        tokio::join!(
            pump(client_read, server_write, state.clone()),
            pump(server_read, client_write, state.clone()),
        )
    };
    let mut state = state.clone();
    tokio::select! {
        _ = both => {}
        _ = state.wait_for(|s| s.generation != generation) => {}
    }
}

/// Copies one direction while the mode is `Pass`; on end of stream it
/// passes the end on (a half close) and returns.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // Under `Hold`, read nothing: the bytes wait in the kernel.
        if state.wait_for(|s| s.mode == Mode::Pass).await.is_err() {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            // A read is cancel safe: a switch to `Hold` drops it unread.
            _ = state.wait_for(|s| s.mode != Mode::Pass) => continue,
        };
        match read {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}
