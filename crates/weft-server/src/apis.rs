//! The external APIs of the binary, each a folder of this crate that owns its options and
//! builds its own ports and routes: OTLP's receivers, Zipkin's, Jaeger's and X-Ray's ports
//! (receiver and query side), Tempo's query API and the UI on the HTTP port.
//!
//! To add one: a folder with an options struct (`clap::Args`, its flags and defaults) that
//! implements [`Api`], and one line in the list below.

use crate::app::Server;

/// An external API: the ports and routes it serves, given the modules that run.
pub trait Api {
    /// Binds this API's ports through `server` and registers what serves them (nothing when
    /// the modules it needs do not run here). Runs once, before anything is served.
    fn build(&self, server: &mut Server) -> impl std::future::Future<Output = anyhow::Result<()>>;
}

macro_rules! apis {
    ($($name:ident: $options:ty,)*) => {
        /// The options of every API, one section each.
        #[derive(Debug, Clone, clap::Args)]
        pub struct ApiOptions {
            $(
                #[command(flatten)]
                pub $name: $options,
            )*
        }

        impl ApiOptions {
            /// Builds every API's ports, in the order listed.
            pub async fn build(&self, server: &mut Server) -> anyhow::Result<()> {
                $( Api::build(&self.$name, server).await?; )*
                Ok(())
            }
        }
    };
}

apis! {
    otlp: crate::otlp::OtlpOptions,
    zipkin: crate::zipkin::ZipkinOptions,
    jaeger: crate::jaeger::JaegerOptions,
    xray: crate::xray::XrayOptions,
    sampling: crate::sampling::SamplingOptions,
    tempo: crate::tempo::TempoOptions,
    ui: crate::ui::UiOptions,
}
