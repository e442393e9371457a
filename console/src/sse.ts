// Server-sent events over fetch(): EventSource cannot send the Authorization
// header, so the console reads the stream itself and sends Last-Event-ID on resume.

export interface SseFrame {
  id: string | null;
  event: string;
  data: string;
}

/** Incremental text/event-stream parser (the WHATWG rules the daemon's frames use). */
export class SseParser {
  private buffer = "";
  private id: string | null = null;
  private event = "";
  private data: string[] = [];

  /** Feed decoded text; returns the frames completed by it. */
  push(text: string): SseFrame[] {
    this.buffer += text;
    const frames: SseFrame[] = [];
    let start = 0;
    for (;;) {
      const end = this.buffer.indexOf("\n", start);
      if (end < 0) break;
      let line = this.buffer.slice(start, end);
      start = end + 1;
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (this.data.length > 0) {
          frames.push({ id: this.id, event: this.event || "message", data: this.data.join("\n") });
        }
        this.event = "";
        this.data = [];
        continue;
      }
      if (line.startsWith(":")) continue; // keep-alive comment
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") this.data.push(value);
      else if (field === "event") this.event = value;
      else if (field === "id") this.id = value;
    }
    this.buffer = this.buffer.slice(start);
    return frames;
  }
}

/** Read an SSE response body, calling `onFrames` with each network chunk's frames. */
export async function readSse(response: Response, onFrames: (frames: SseFrame[]) => void): Promise<void> {
  if (!response.body) return;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const frames = parser.push(value);
    if (frames.length > 0) onFrames(frames);
  }
}
