//! The bench's network (bench/cluster.py, `--delay`): forwards TCP on
//! loopback and holds every chunk of bytes for a fixed one-way delay in
//! each direction, as a network with that round trip would, without tc or
//! netem (not here). Order is kept and nothing is coalesced away: a chunk
//! read at `t` is written at `t + delay`, so a request and its answer cost
//! two delays, and pipelined requests overlap as they would on a wire.
//!
//!     delay-proxy --delay-us 250 LISTEN=TARGET [LISTEN=TARGET ...]
//!
//! Each direction of a connection is two threads: a reader that stamps
//! what it reads and a writer that sleeps until the stamp plus the delay
//! (`thread::sleep` is nanosleep: tens of microseconds late at most, where
//! tokio's timer wheel would round up to a millisecond). Blocking threads,
//! not async: a bench has tens of connections, and the proxy's own CPU is
//! read from /proc by the harness and printed beside the figures.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut delay = None;
    let mut routes = Vec::new();
    while let Some(arg) = args.next() {
        if arg == "--delay-us" {
            let us: u64 = args
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| fail("--delay-us takes microseconds"));
            delay = Some(Duration::from_micros(us));
        } else if let Some((listen, target)) = arg.split_once('=') {
            routes.push((listen.to_owned(), target.to_owned()));
        } else {
            fail(&format!("unknown argument {arg:?}"));
        }
    }
    let delay = delay.unwrap_or_else(|| fail("--delay-us is required"));
    if routes.is_empty() {
        fail("give at least one LISTEN=TARGET");
    }
    let mut accepting = Vec::new();
    for (listen, target) in routes {
        let listener = TcpListener::bind(&listen)
            .unwrap_or_else(|e| fail(&format!("cannot listen on {listen}: {e}")));
        eprintln!(
            "delay-proxy: {listen} -> {target}, {} µs each way",
            delay.as_micros()
        );
        accepting.push(thread::spawn(move || accept(listener, target, delay)));
    }
    // Ready: the harness waits for this line.
    println!("ready");
    for t in accepting {
        let _ = t.join();
    }
}

fn fail(why: &str) -> ! {
    eprintln!("delay-proxy: {why}");
    std::process::exit(2)
}

fn accept(listener: TcpListener, target: String, delay: Duration) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let target = target.clone();
        thread::spawn(move || {
            let Ok(server) = TcpStream::connect(&target) else {
                return;
            };
            for s in [&client, &server] {
                let _ = s.set_nodelay(true);
            }
            let (c2, s2) = match (client.try_clone(), server.try_clone()) {
                (Ok(c), Ok(s)) => (c, s),
                _ => return,
            };
            thread::spawn(move || forward(c2, s2, delay));
            forward(server, client, delay);
        });
    }
}

/// Bytes from `from` to `to`, each chunk `delay` after it was read; the end
/// of `from` ends `to`'s writing side once what was read before went out.
fn forward(from: TcpStream, to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let mut reader = from;
    let reading = thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = reader.shutdown(Shutdown::Read);
    });
    let mut writer = to;
    for (read_at, bytes) in rx {
        let due = read_at + delay;
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        if writer.write_all(&bytes).is_err() {
            break;
        }
    }
    let _ = writer.shutdown(Shutdown::Write);
    let _ = reading.join();
}
