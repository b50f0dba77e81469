//! The round trips clients make, as Valkey's `MONITOR` shows them.

/// The commands a client sent, as `MONITOR` shows them between two `ECHO` marks (a script's own
/// commands show as `lua` and are not round trips, and the schemas lease is no part of the work:
/// both are left out).
pub async fn round_trips_of(url: &str, work: impl std::future::Future<Output = ()>) -> Vec<String> {
    use futures::StreamExt;
    let client = redis::Client::open(url).expect("url");
    let mut monitor = client.get_async_monitor().await.expect("MONITOR");
    let mut mark = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: String = redis::cmd("ECHO")
        .arg("begin")
        .query_async(&mut mark)
        .await
        .expect("ECHO");
    let mut lines = monitor.on_message::<String>();
    while let Some(line) = lines.next().await {
        if line.contains("\"begin\"") {
            break;
        }
    }
    work.await;
    let _: String = redis::cmd("ECHO")
        .arg("end")
        .query_async(&mut mark)
        .await
        .expect("ECHO");
    let mut commands = Vec::new();
    while let Some(line) = lines.next().await {
        if line.contains("\"ECHO\" \"end\"") {
            break;
        }
        // A script's own commands, and the table's live-schemas lease (renewed every 500 ms by
        // every table, whatever it is doing), are not the work's round trips.
        if line.contains(" lua]") || line.contains("schemas:") {
            continue;
        }
        let command = line
            .split("] \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        commands.push(command.unwrap_or(&line).to_owned());
    }
    commands
}
