//! Async reading and writing of `crackbox_wire::link` frames on tokio streams.

use crackbox_wire::link::{self, Message, WireError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Reads one message (not cancel-safe: run it in its own task or to completion).
pub async fn read(reader: &mut (impl AsyncRead + Unpin)) -> Result<Message, WireError> {
    let mut header = [0u8; 4];
    reader.read_exact(&mut header).await?;
    let mut payload = vec![0u8; link::frame_len(header)?];
    reader.read_exact(&mut payload).await?;
    link::decode_payload(&payload)
}

/// Writes one message.
pub async fn write(writer: &mut (impl AsyncWrite + Unpin), message: &Message) -> Result<(), WireError> {
    writer.write_all(&link::encode(message)).await?;
    writer.flush().await?;
    Ok(())
}
