//! `wring pull`: fetch the default model (or a hub model) into the cache.

use wring_model::hub;

#[derive(clap::Args)]
pub struct Args {
    /// A Hugging Face repository (ORG/NAME) to download; default: the default model.
    pub model: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = match args.model.as_deref() {
        None => hub::ensure_default_model(false)?,
        Some(m) => hub::hub_snapshot(m)?,
    };
    println!("{}", path.display());
    Ok(())
}
