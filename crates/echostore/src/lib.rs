//! EchoStore (in progress).
