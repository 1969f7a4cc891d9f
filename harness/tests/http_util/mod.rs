//! What the HTTP tests share: `pocketperf serve --http` on a free loopback port, one worker
//! thread, stopped when dropped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pocketperf::http::client::HttpClient;

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
