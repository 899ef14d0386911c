//! The heavy harness (feature `harness`): servers and simulators for the tests that drive a
//! real function binary or put faults between the toolkit and DynamoDB.

pub mod fault_proxy;
pub mod function;
mod http;
pub mod runtime_api;
pub mod sqs_sim;
