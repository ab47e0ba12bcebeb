//! A TCP proxy a test can cut: every connection through it is forwarded to
//! one target until [`Proxy::cut`], which closes the open ones and refuses
//! new ones until [`Proxy::heal`]. Cluster tests put one between every
//! ordered pair of controllers to partition the network.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

pub struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

/// Copies `from` to `to` until either side ends, then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    // Either side may be closed already; the other end sees the close.
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target` (host:port).
    pub fn start(target: String) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (cut_flag, tracked) = (cut.clone(), open.clone());
        thread::spawn(move || {
            for incoming in listener.incoming() {
                let Ok(client) = incoming else { continue };
                if cut_flag.load(Ordering::Acquire) {
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let clones = (client.try_clone(), server.try_clone());
                let (Ok(client_back), Ok(server_back)) = clones else {
                    continue;
                };
                {
                    let mut open = tracked.lock().expect("proxy lock");
                    for stream in [&client, &server] {
                        if let Ok(clone) = stream.try_clone() {
                            open.push(clone);
                        }
                    }
                }
                thread::spawn(move || pump(client, server));
                thread::spawn(move || pump(server_back, client_back));
            }
        });
        Ok(Proxy { port, cut, open })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for stream in self.open.lock().expect("proxy lock").drain(..) {
            // Closing what may be closed already: nothing to report.
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Forwards new connections again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::Release);
    }
}
