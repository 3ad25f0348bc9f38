//! TCP proxies of a test in front of brokers of its own cluster (brokers
//! advertise a listener at the proxies' addresses): a broker moved behind
//! its address, or a route to it lost.

use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

/// A TCP proxy whose new connections go where [`Proxy::point`] says; the
/// open ones stay with the process they reached, until [`Proxy::sever`].
pub struct Proxy {
    target: watch::Sender<String>,
    task: JoinHandle<()>,
    open: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    pub async fn start(listen: &str, target: String) -> Proxy {
        let listener = TcpListener::bind(listen)
            .await
            .expect("the advertised port is free");
        let (tx, rx) = watch::channel(target);
        let open: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let connections = open.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = rx.borrow().clone();
                let connection = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&to).await {
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                let mut open = connections.lock().unwrap();
                open.retain(|c| !c.is_finished());
                open.push(connection.abort_handle());
            }
        });
        Proxy {
            target: tx,
            task,
            open,
        }
    }

    /// New connections go to `target` from now on.
    pub fn point(&self, target: String) {
        self.target.send_replace(target);
    }

    /// The route is lost: new connections are refused (the port is closed)
    /// and the open ones are closed.
    pub fn sever(&self) {
        self.task.abort();
        for connection in self.open.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
