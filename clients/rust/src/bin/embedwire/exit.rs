//! How a failure ends the program: one line on stderr and an exit code a script
//! can branch on.

use std::process::ExitCode;

use embedwire_client::{Code, Error};

/// Exit codes. 2 is clap's for usage errors.
pub const OTHER: u8 = 1;
/// The server could not be reached, timed out, or shed the load (try again later).
pub const UNAVAILABLE: u8 = 3;
/// The server refused the request (fix the request).
pub const SERVER_ERROR: u8 = 4;

/// Prints `error: ...` and picks the exit code. A closed stdout (`| head`) is not
/// an error.
pub fn report(error: anyhow::Error) -> ExitCode {
    if error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    }) {
        return ExitCode::SUCCESS;
    }
    eprintln!("error: {error:#}");
    ExitCode::from(code_for(&error))
}

fn code_for(error: &anyhow::Error) -> u8 {
    match error.chain().find_map(|cause| cause.downcast_ref::<Error>()) {
        Some(client) if client.is_unavailable() => UNAVAILABLE,
        Some(Error::Status { code, .. }) if *code != Code::Ok => SERVER_ERROR,
        _ => OTHER,
    }
}
