//! What the HTTP tests share: `pocketperf serve --http` on a free loopback port, one worker
//! thread, stopped when dropped; and the request reader of the tests' fake servers.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pocketperf::http::client::HttpClient;
use serde_json::Value;

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
}

pub struct Server {
    pub child: Child,
    pub url: String,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        let mut child = bin()
            .args(["serve", "--http", "127.0.0.1:0", "--threads", "1"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("pocketperf serve: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Server { child, url }
    }

    pub fn client(&self) -> HttpClient {
        HttpClient::new(
            &self.url,
            64,
            Duration::from_secs(120),
            Duration::from_secs(60),
        )
        .unwrap()
    }

    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads one request: the request line, headers and a `Content-Length` body.
pub fn read_request(s: &mut BufReader<TcpStream>) -> Option<(String, Value)> {
    let mut line = String::new();
    s.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        s.read_line(&mut h).ok()?;
        if h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some((path, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}
