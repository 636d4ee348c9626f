//! The terminal pumps between crackbox and an attached workload container:
//! its output to crackbox's stdout and stderr, crackbox's stdin to it, and
//! the TTY kept the size of crackbox's terminal. They end with the
//! container's streams and never hold the run open.

use crate::terminal;
use bollard::container::LogOutput;
use bollard::query_parameters::ResizeContainerTTYOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use std::pin::Pin;
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};

/// The attached container's output stream.
type Output = Pin<Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// Copies the workload's output to crackbox's stdout and stderr.
pub async fn pump_output(mut output: Output) {
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    while let Some(Ok(chunk)) = output.next().await {
        let written = match chunk {
            LogOutput::StdErr { message } => stderr.write_all(&message).await.and(stderr.flush().await),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                stdout.write_all(&message).await.and(stdout.flush().await)
            }
            LogOutput::StdIn { .. } => Ok(()),
        };
        if written.is_err() {
            break;
        }
    }
}

/// Copies crackbox's stdin to the workload; closes the workload's stdin at
/// end of input.
pub async fn pump_input(mut input: Pin<Box<dyn tokio::io::AsyncWrite + Send>>) {
    let mut chunks = terminal::stdin_chunks();
    while let Some(chunk) = chunks.recv().await {
        if input.write_all(&chunk).await.is_err() || input.flush().await.is_err() {
            return;
        }
    }
    let _ = input.shutdown().await;
}

/// Keeps the workload's TTY the size of crackbox's terminal.
pub async fn follow_terminal_size(docker: Docker, name: String) {
    let Ok(mut winch) = signal(SignalKind::window_change()) else {
        return;
    };
    loop {
        if let Some((rows, cols)) = terminal::terminal_size() {
            let options = ResizeContainerTTYOptionsBuilder::default()
                .h(i32::from(rows))
                .w(i32::from(cols))
                .build();
            let _ = docker.resize_container_tty(&name, options).await;
        }
        if winch.recv().await.is_none() {
            return;
        }
    }
}
