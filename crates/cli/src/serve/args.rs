//! The flags of `decider serve`, each with its `DECIDER_*` environment variable and its default
//! (written once, here).

use crate::backend::BackendName;
use crate::model_source::{MODEL_HELP, ModelSource, WeightsArg};

#[derive(clap::Args)]
pub struct ServeArgs {
    #[arg(long, env = "DECIDER_MODEL", help = MODEL_HELP)]
    pub model: ModelSource,
    #[command(flatten)]
    pub weights: WeightsArg,
    /// One temperature for every answer type, instead of decider_config.json's.
    #[arg(long, env = "DECIDER_TEMPERATURE")]
    pub temperature: Option<f64>,
    /// Address to listen on: `HOST:PORT`, the host a name (`localhost`) or an IP address.
    #[arg(long, env = "DECIDER_ADDR", default_value = "127.0.0.1:8000", value_parser = host_and_port)]
    pub addr: String,
    #[arg(long, env = "DECIDER_BACKEND", value_parser = BackendName::parser(), default_value_t = BackendName::default_name())]
    pub backend: BackendName,
    /// Scoring rows one request may expand to (questions and isolated Score levels).
    #[arg(long, env = "DECIDER_MAX_ROWS", default_value_t = 1024)]
    pub max_rows: usize,
    /// Tokens of the state segment; longer states are cut.
    #[arg(long, env = "DECIDER_MAX_STATE_TOKENS", default_value_t = 32768)]
    pub max_state_tokens: usize,
    /// Tokens in one row (default: the state cap + 4,096).
    #[arg(long, env = "DECIDER_MAX_ROW_TOKENS")]
    pub max_row_tokens: Option<usize>,
    /// Tokens of all rows of one request.
    #[arg(long, env = "DECIDER_MAX_REQUEST_TOKENS", default_value_t = 1 << 20)]
    pub max_request_tokens: usize,
    /// Rows admitted and not yet answered, over all requests; more is a 503.
    #[arg(long, env = "DECIDER_MAX_QUEUE_ROWS", default_value_t = 4096)]
    pub max_queue_rows: usize,
    /// Largest request body in bytes (413 above).
    #[arg(long, env = "DECIDER_MAX_BODY_BYTES", default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
    /// MiB that requests in flight may hold: bodies as they arrive, the JSON they parse to, their
    /// plans and the model's working memory for them (413 for a request that could never fit,
    /// 503 while others hold it).
    #[arg(long, env = "DECIDER_MAX_MEMORY", default_value_t = 4096, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub max_memory: usize,
    /// Seconds a connection may wait for a request's headers, idle keep-alive included; then it is closed.
    #[arg(long, env = "DECIDER_HEADER_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub header_timeout: u64,
    /// Seconds a request's body may take to arrive (408 after).
    #[arg(long, env = "DECIDER_BODY_TIMEOUT", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub body_timeout: u64,
    /// Seconds a write of an answer may wait for the client to read; then the connection is closed.
    #[arg(long, env = "DECIDER_WRITE_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub write_timeout: u64,
    /// Seconds requests in flight get to finish after SIGTERM or Ctrl-C; then those still waiting
    /// for the model are answered 503 and the server exits.
    #[arg(long, env = "DECIDER_SHUTDOWN_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub shutdown_timeout: u64,
    /// Answer a client that half-closes its connection (sends its FIN) after a request. Off by
    /// default, as uvicorn (which serves the reference) has it: a half-closed client cannot be
    /// told from one that hung up, so with this on the work of clients that left runs too and
    /// holds its place in the queue and the memory budget until it is answered.
    #[arg(long, env = "DECIDER_HALF_CLOSE")]
    pub half_close: bool,
}

/// `HOST:PORT` as given, once it has both: a port alone (`8000`, `:8000`) is refused with the
/// forms that say which interfaces to listen on.
fn host_and_port(addr: &str) -> Result<String, String> {
    let port = addr.trim_start_matches(':');
    let has_host_and_port =
        addr.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    match addr {
        _ if has_host_and_port => Ok(addr.to_string()),
        _ if port.parse::<u16>().is_ok() => Err(format!(
            "expected HOST:PORT, such as 127.0.0.1:{port} (this machine only) or 0.0.0.0:{port} (every interface)"
        )),
        _ => Err("expected HOST:PORT, such as 127.0.0.1:8000, localhost:8000 or [::1]:8000".into()),
    }
}

impl ServeArgs {
    /// `decider serve --addr 127.0.0.1:0` (a free port) of `model`: every other setting is its
    /// flag's default, or its `DECIDER_*` variable's value where one is set.
    pub fn new(model: ModelSource) -> Self {
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            args: ServeArgs,
        }
        let mut args = <Serve as clap::Parser>::parse_from(["serve", "--model", "demo", "--addr", "127.0.0.1:0"]).args;
        args.model = model;
        args
    }
}
