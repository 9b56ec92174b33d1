#[derive(clap::Args)]
pub struct Args {}
#[derive(clap::Args)]
pub struct TuneArgs {}
#[derive(clap::Args)]
pub struct ReportArgs {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
pub fn run_tune(_args: TuneArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
pub fn run_report(_args: ReportArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
