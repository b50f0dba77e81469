//! `echostore valkey`: an embedded Valkey on the port asked for, kept running until Ctrl-C, and a
//! command that exits (with an error) when its server dies, so a supervisor sees the Valkey gone.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn serves_on_the_port_asked_for_and_exits_when_its_server_dies() {
    let port = embedded_valkey::free_loopback_port().expect("a free port");
    let mut command = Command::new(env!("CARGO_BIN_EXE_echostore"))
        .args(["valkey", "--port", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("echostore valkey runs");
    let mut url = String::new();
    BufReader::new(command.stdout.take().expect("stdout"))
        .read_line(&mut url)
        .expect("the URL line");
    assert_eq!(url.trim(), format!("redis://127.0.0.1:{port}/"));
    let mut running = String::new();
    let mut stderr = BufReader::new(command.stderr.take().expect("stderr"));
    stderr.read_line(&mut running).expect("the running line");
    let pid: i32 = running
        .split("pid ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {running:?}"));

    // The server answers on that port.
    let client = redis::Client::open(url.trim()).expect("url");
    let mut conn = client.get_connection().expect("connect");
    let pong: String = redis::cmd("PING").query(&mut conn).expect("PING");
    assert_eq!(pong, "PONG");

    // Killed from outside, the server takes the command with it.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).expect("a pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill valkey-server");
    let status = command.wait().expect("the command exits");
    assert!(!status.success(), "a dead server is an error: {status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("stderr");
    assert!(rest.contains("exited by itself"), "{rest}");
}
