//! Just enough HTTP/1.1 for the test servers (the Runtime API emulator, the fault proxy):
//! read a message with a `Content-Length` or chunked body, write one back.

use tokio::io::{AsyncBufReadExt, AsyncReadExt};

/// One HTTP/1.1 message: its head (start line and headers, without the framing headers)
/// and its body.
pub struct Message {
    pub head: Vec<String>,
    pub body: Vec<u8>,
}

impl Message {
    /// The method and path of a request's start line.
    pub fn request_line(&self) -> (&str, &str) {
        let mut parts = self
            .head
            .first()
            .map_or("", String::as_str)
            .split_whitespace();
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for line in &self.head {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", self.body.len()).as_bytes());
        out.extend_from_slice(&self.body);
        out
    }
}

pub async fn read_message<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<Message>> {
    let mut head = Vec::new();
    let mut content_length = 0usize;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let line = line.trim_end().to_string();
        if line.is_empty() {
            if head.is_empty() {
                continue;
            }
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            content_length = value.trim().parse().unwrap_or(0);
            continue;
        }
        if lower.starts_with("transfer-encoding:") {
            chunked = lower.contains("chunked");
            continue;
        }
        head.push(line);
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size_line = String::new();
            reader.read_line(&mut size_line).await?;
            let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(content_length, 0);
        reader.read_exact(&mut body).await?;
    }
    Ok(Some(Message { head, body }))
}
