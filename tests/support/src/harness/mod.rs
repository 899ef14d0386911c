//! The heavy harness (feature `harness`): servers and simulators for the tests that drive a
//! real function binary or put faults between the toolkit and DynamoDB, and the chaos run
//! (`chaos`) any order consumer binary can be put through.

pub mod chaos;
pub mod fault_proxy;
pub mod function;
mod http;
pub mod runtime_api;
pub mod sqs_sim;

/// Sends `signal` (`-TERM`, `-KILL`, `-STOP`, ...) to the process `pid`, as `kill` does;
/// a process already gone is no error.
pub fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}
