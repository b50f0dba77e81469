//! A small HTTP service with EchoStore in front of a real SQLite database: what the README's
//! "Using it" looks like in a service.
//!
//! ```text
//! cargo run -p echostore --example users_service                   # serves on 127.0.0.1:3000 until Ctrl-C
//! cargo run -p echostore --example users_service -- --self-check    # serves itself a few requests, prints the stats, exits
//! ```
//!
//! - `GET /users/{id}`: the user as JSON, `404` for no such user (cached too: the table's values
//!   are `Option<User>`), `503` when the database fails. The `x-cache` header says where the
//!   answer came from (`l1`, `l2`, `loaded`, `coalesced`, `stale`, `default`).
//! - `PUT /users/{id}` with `{"name": .., "email": ..}`: writes the database, then the cache
//!   (`Table::put` returns the stored `Arc`, which the handler answers with).
//! - `GET /stats`: the table's counters as JSON.
//!
//! The database is a file in a temporary directory, created and seeded at start. Valkey is
//! optional: `--valkey <url>` (or `ECHOSTORE_VALKEY_URL`) uses one; with `--self-check` and no
//! URL, the example starts a private embedded Valkey when it can and runs without one when it
//! cannot. Options: `--addr <host:port>` (default `127.0.0.1:3000`), `--no-valkey`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use echostore::{LoserPolicy, Store, Table};
use rusqlite::OptionalExtension;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A row of the `users` table, and the cached value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: i64,
    name: String,
    email: String,
}

/// What a `PUT` sends.
#[derive(Debug, Deserialize)]
struct UserUpdate {
    name: String,
    email: String,
}

/// The database: one SQLite connection behind a mutex (a pool of one), used from blocking tasks.
#[derive(Clone)]
struct Db(Arc<Mutex<rusqlite::Connection>>);

impl Db {
    /// Creates `users.db` in `dir` and seeds it with `rows` users.
    fn create(dir: &std::path::Path, rows: i64) -> anyhow::Result<Db> {
        let conn = rusqlite::Connection::open(dir.join("users.db"))?;
        conn.execute_batch(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL);",
        )?;
        let mut insert = conn.prepare("INSERT INTO users (id, name, email) VALUES (?1, ?2, ?3)")?;
        for id in 1..=rows {
            insert.execute((id, format!("user {id}"), format!("user{id}@example.com")))?;
        }
        drop(insert);
        Ok(Db(Arc::new(Mutex::new(conn))))
    }

    /// Runs `query` on the connection, off the async worker threads.
    async fn run<T: Send + 'static>(
        &self,
        query: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let conn = Arc::clone(&self.0);
        tokio::task::spawn_blocking(move || {
            let conn = conn
                .lock()
                .map_err(|_| anyhow::anyhow!("the connection's mutex is poisoned"))?;
            // With context, the rusqlite error stays the chain's typed cause: `unavailable`
            // finds it with `source_as`.
            query(&conn).context("querying the users table")
        })
        .await?
    }

    /// `SELECT` one user: `None` when there is no such row.
    async fn user(&self, id: i64) -> anyhow::Result<Option<User>> {
        self.run(move |conn| {
            conn.query_row(
                "SELECT id, name, email FROM users WHERE id = ?1",
                [id],
                |row| {
                    Ok(User {
                        id: row.get(0)?,
                        name: row.get(1)?,
                        email: row.get(2)?,
                    })
                },
            )
            .optional()
        })
        .await
    }

    /// `UPDATE` one user; `false` when there is no such row.
    async fn update(&self, user: User) -> anyhow::Result<bool> {
        self.run(move |conn| {
            conn.execute(
                "UPDATE users SET name = ?2, email = ?3 WHERE id = ?1",
                (user.id, &user.name, &user.email),
            )
            .map(|changed| changed == 1)
        })
        .await
    }
}

/// What the handlers share: the database and the cache table in front of it.
#[derive(Clone)]
struct App {
    db: Db,
    users: Table<i64, Option<User>>,
}

/// `GET /users/{id}`
async fn get_user(State(app): State<App>, Path(id): Path<i64>) -> Response {
    match app.users.fetch(&id).await {
        Ok(fetched) => {
            let header = [("x-cache", fetched.origin.to_string())];
            match fetched.value.as_ref() {
                Some(user) => (header, Json(user)).into_response(),
                None => (StatusCode::NOT_FOUND, header, "no such user").into_response(),
            }
        }
        Err(e) => unavailable(e),
    }
}

/// `PUT /users/{id}`: the database first, then the cache, so that a reader never sees a value
/// the database does not hold.
async fn put_user(
    State(app): State<App>,
    Path(id): Path<i64>,
    Json(update): Json<UserUpdate>,
) -> Response {
    let user = User {
        id,
        name: update.name,
        email: update.email,
    };
    match app.db.update(user.clone()).await {
        Ok(true) => {}
        Ok(false) => return (StatusCode::NOT_FOUND, "no such user").into_response(),
        Err(e) => {
            eprintln!("database error: {e:#}");
            return (StatusCode::SERVICE_UNAVAILABLE, "the database failed").into_response();
        }
    }
    match app.users.put(&id, Some(user)).await {
        // The stored Arc: the value L1 now holds, answered without a clone.
        Ok(stored) => Json(stored.as_ref()).into_response(),
        Err(e) => unavailable(e),
    }
}

/// `GET /stats`
async fn stats(State(app): State<App>) -> Response {
    Json(app.users.stats()).into_response()
}

/// A cache error as a response: the loader's own error (the database's) is reached with
/// `source_as`; anything else is the cache's.
fn unavailable(e: echostore::Error) -> Response {
    if let Some(db) = e.source_as::<rusqlite::Error>() {
        eprintln!("database error: {db}");
    } else {
        eprintln!("cache error: {e}");
    }
    (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response()
}

/// The command line.
struct Options {
    self_check: bool,
    addr: SocketAddr,
    valkey: Option<String>,
    no_valkey: bool,
}

impl Options {
    fn parse() -> anyhow::Result<Options> {
        let mut options = Options {
            self_check: false,
            addr: "127.0.0.1:3000".parse()?,
            valkey: std::env::var("ECHOSTORE_VALKEY_URL").ok(),
            no_valkey: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--self-check" => options.self_check = true,
                "--no-valkey" => options.no_valkey = true,
                "--addr" => options.addr = args.next().context("--addr needs a value")?.parse()?,
                "--valkey" => options.valkey = Some(args.next().context("--valkey needs a URL")?),
                other => bail!(
                    "unknown argument {other:?}; use --self-check, --addr <host:port>, --valkey <url>, --no-valkey"
                ),
            }
        }
        Ok(options)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse()?;

    let dir = tempfile::tempdir()?;
    let db = Db::create(dir.path(), 100)?;

    // Valkey: the one given; with --self-check, a private one if this machine can run one.
    let mut embedded = None;
    let valkey = match (&options.valkey, options.no_valkey, options.self_check) {
        (_, true, _) => None,
        (Some(url), _, _) => Some(url.clone()),
        (None, false, true) => match embedded_valkey::EmbeddedValkey::start() {
            Ok(server) => Some(embedded.insert(server).url()),
            Err(e) => {
                eprintln!("no embedded Valkey ({e}); running with L1 only");
                None
            }
        },
        (None, false, false) => None,
    };
    let mut store = Store::builder();
    if let Some(url) = &valkey {
        store = store.valkey(url.as_str());
    }
    let store = store.build().await?;

    let users = store
        .table::<i64, Option<User>>("users")
        .ttl(Duration::from_secs(60))
        .stale_for(Duration::from_secs(300))
        .losers(LoserPolicy::ServeStale)
        .fail_safe(true)
        .loader({
            let db = db.clone();
            move |id: i64| {
                let db = db.clone();
                async move { db.user(id).await }
            }
        })
        .build()
        .await?;
    let app = App { db, users };
    let router = Router::new()
        .route("/users/{id}", get(get_user).put(put_user))
        .route("/stats", get(stats))
        .with_state(app.clone());

    let addr = if options.self_check {
        SocketAddr::from(([127, 0, 0, 1], 0))
    } else {
        options.addr
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    println!(
        "users_service on http://{addr} (valkey: {})",
        valkey.as_deref().unwrap_or("none")
    );

    if !options.self_check {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        return Ok(());
    }

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    let checked = self_check(addr, &app).await;
    let _ = stop.send(());
    server.await??;
    checked?;
    println!("{}", serde_json::to_string_pretty(&app.users.stats())?);
    println!("self-check passed");
    Ok(())
}

/// Serves the service a few requests over HTTP and checks the answers and the counters.
async fn self_check(addr: SocketAddr, app: &App) -> anyhow::Result<()> {
    let first = request(addr, "GET", "/users/1", None).await?;
    ensure!(first.status == 200, "GET /users/1: {first:?}");
    ensure!(first.cache.as_deref() == Some("loaded"), "{first:?}");
    ensure!(first.body.contains("user1@example.com"), "{first:?}");
    let again = request(addr, "GET", "/users/1", None).await?;
    ensure!(
        again.cache.as_deref() == Some("l1"),
        "GET /users/1 again: {again:?}"
    );

    let missing = request(addr, "GET", "/users/999", None).await?;
    ensure!(missing.status == 404, "GET /users/999: {missing:?}");
    let missing = request(addr, "GET", "/users/999", None).await?;
    ensure!(
        (missing.status, missing.cache.as_deref()) == (404, Some("l1")),
        "\"not found\" is cached: {missing:?}"
    );

    let body = r#"{"name":"Alice","email":"alice@example.com"}"#;
    let put = request(addr, "PUT", "/users/2", Some(body)).await?;
    ensure!(
        put.status == 200 && put.body.contains("Alice"),
        "PUT: {put:?}"
    );
    let read = request(addr, "GET", "/users/2", None).await?;
    ensure!(
        read.cache.as_deref() == Some("l1") && read.body.contains("Alice"),
        "GET after PUT: {read:?}"
    );

    // A herd on one id: one database read.
    let herd = (0..50).map(|_| tokio::spawn(request(addr, "GET", "/users/3", None)));
    for answer in futures::future::join_all(herd).await {
        let answer = answer??;
        ensure!(answer.status == 200, "herd: {answer:?}");
    }

    let stats = app.users.stats();
    ensure!(
        stats.source_reads == 3,
        "expected 3 database reads (ids 1, 999, 3), got {stats:?}"
    );
    let served = request(addr, "GET", "/stats", None).await?;
    ensure!(served.body.contains("\"source_reads\":3"), "{served:?}");
    Ok(())
}

/// One HTTP response, as the self-check reads it.
#[derive(Debug)]
struct Answer {
    status: u16,
    cache: Option<String>,
    body: String,
}

/// One HTTP/1.1 request on a connection of its own (the example needs no HTTP client crate).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> anyhow::Result<Answer> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let body = json.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .context("no response within 10 s")??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("a response without a blank line")?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .context("no status line")?
        .parse()?;
    let cache = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("x-cache")
            .then(|| value.trim().to_owned())
    });
    Ok(Answer {
        status,
        cache,
        body: body.to_owned(),
    })
}
