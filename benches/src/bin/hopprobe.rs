//! TEMPORARY: what hops cost under contention (not committed).
#![allow(missing_docs)]
use std::time::{Duration, Instant};
use echostore::{Origin, Store};
use redis::AsyncCommands;
use tokio::sync::{mpsc, oneshot};
fn main() {
    let rt = echostore_benches::runtime();
    let valkey = embedded_valkey::EmbeddedValkey::start().unwrap();
    let url = valkey.url();
    let n = 20_000u64;
    rt.block_on(async move {
        let w = Store::builder().valkey(url.as_str()).build().await.unwrap();
        let wt = w.table::<u64, String>("p").ttl(Duration::from_secs(3600)).loader(|_id: u64| async move { Err::<String,_>(std::io::Error::other("x")) }).start().await.unwrap();
        for id in 0..n { wt.put(&id, format!("{id:064}")).await.unwrap(); }
        let r = Store::builder().valkey(url.as_str()).build().await.unwrap();
        let table = r.table::<u64, String>("p").ttl(Duration::from_secs(3600)).l1_capacity(1).loader(|_id: u64| async move { Err::<String,_>(std::io::Error::other("x")) }).start().await.unwrap();
        let conn = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        // an "owner": a task answering each request at once
        let (tx, mut rx) = mpsc::unbounded_channel::<oneshot::Sender<()>>();
        tokio::spawn(async move { while let Some(r) = rx.recv().await { let _ = r.send(()); } });
        let task = tokio::spawn(async move {
            let mut res: Vec<Vec<f64>> = vec![vec![]; 4];
            let batch = 2000u64;
            for round in 0..8 {
                for k in 0..4 {
                    let k = (k + round) % 4;
                    let t = Instant::now();
                    for i in 0..batch {
                        let id = (round as u64 * batch + i) % n;
                        let mut c = conn.clone();
                        match k {
                            0 => { let _: Option<Vec<u8>> = c.get(format!("p:{{{id}}}")).await.unwrap(); }
                            1 => { let (a, b) = oneshot::channel(); tx.send(a).unwrap(); b.await.unwrap(); let _: Option<Vec<u8>> = c.get(format!("p:{{{id}}}")).await.unwrap(); }
                            2 => { let (a, b) = oneshot::channel(); tx.send(a).unwrap(); b.await.unwrap(); let _: Option<Vec<u8>> = tokio::spawn(async move { c.get::<_, Option<Vec<u8>>>(format!("p:{{{id}}}")).await.unwrap() }).await.unwrap(); let (a, b) = oneshot::channel(); tx.send(a).unwrap(); b.await.unwrap(); }
                            _ => { let f = table.fetch(&id).await.unwrap(); assert_eq!(f.origin, Origin::L2); }
                        }
                    }
                    res[k].push(t.elapsed().as_nanos() as f64 / batch as f64);
                }
            }
            let names = ["raw GET", "owner round trip + GET (leader drives)", "owner rt + spawned GET + owner rt (today's shape)", "echostore L2 hit"];
            for (k, mut v) in res.into_iter().enumerate() { v.sort_by(f64::total_cmp); println!("{:50} median {:.1} µs", names[k], v[v.len()/2] / 1e3); }
        });
        task.await.unwrap();
    });
}
