//! cgroup v1 for the benchmarks: the system under test gets one CPU (cpuset), a 100 % CPU
//! quota and a memory limit, and its CPU time and anonymous memory are read from the cgroup
//! (BENCH.md). Processes are started *inside* it (through a shell that joins it and then
//! `exec`s), so a runtime that sizes itself to the CPUs it sees sees one.

use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Context as _, Result, bail};

const ROOT: &str = "/sys/fs/cgroup";
const CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "cpuset", "memory"];

/// A cgroup in every controller the benchmarks use.
pub struct Cgroup {
    name: String,
}

/// The cgroup new processes of [`command`] start in, if any (while [`Cgroup::start`] runs).
static ACTIVE: Mutex<Option<String>> = Mutex::new(None);

impl Cgroup {
    /// Whether this machine lets us make one (root, cgroup v1 controllers mounted).
    pub fn available() -> bool {
        CONTROLLERS.iter().all(|c| {
            let probe = PathBuf::from(ROOT).join(c).join(format!("hearth-probe-{}", std::process::id()));
            let made = std::fs::create_dir(&probe).is_ok();
            let _ = std::fs::remove_dir(&probe);
            made
        })
    }

    /// Makes `hearth-bench-<name>`: CPU `cpu` only, a 100 % quota of it, `memory` bytes.
    pub fn create(name: &str, cpu: usize, memory: u64) -> Result<Cgroup> {
        let name = format!("hearth-bench-{name}");
        let cgroup = Cgroup { name };
        for c in CONTROLLERS {
            let dir = cgroup.dir(c);
            if dir.exists() {
                cgroup.empty(c);
                let _ = std::fs::remove_dir(&dir);
            }
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mems = std::fs::read_to_string(PathBuf::from(ROOT).join("cpuset/cpuset.mems"))?;
        cgroup.write("cpuset", "cpuset.cpus", &cpu.to_string())?;
        cgroup.write("cpuset", "cpuset.mems", mems.trim())?;
        cgroup.write("cpu", "cpu.cfs_period_us", "100000")?;
        cgroup.write("cpu", "cpu.cfs_quota_us", "100000")?;
        cgroup.write("memory", "memory.limit_in_bytes", &memory.to_string())?;
        Ok(cgroup)
    }

    fn dir(&self, controller: &str) -> PathBuf {
        PathBuf::from(ROOT).join(controller).join(&self.name)
    }

    fn write(&self, controller: &str, file: &str, value: &str) -> Result<()> {
        let path = self.dir(controller).join(file);
        std::fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }

    fn read(&self, controller: &str, file: &str) -> Result<String> {
        let path = self.dir(controller).join(file);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }

    /// Runs `start`, during which [`command`] starts processes in this cgroup.
    pub fn start<T>(&self, start: impl FnOnce() -> T) -> T {
        *ACTIVE.lock().expect("cgroup lock") = Some(self.name.clone());
        let started = start();
        *ACTIVE.lock().expect("cgroup lock") = None;
        started
    }

    /// CPU time used by everything in it, in nanoseconds.
    pub fn cpu_ns(&self) -> Result<u64> {
        self.read("cpuacct", "cpuacct.usage")?.trim().parse().context("cpuacct.usage")
    }

    /// Anonymous memory of everything in it (`total_rss` of `memory.stat`), in bytes.
    pub fn anon_bytes(&self) -> Result<u64> {
        anon_in(&self.dir("memory"))
    }

    /// Page cache charged to it (`total_cache` of `memory.stat`), in bytes.
    pub fn cache_bytes(&self) -> Result<u64> {
        stat_field(&self.read("memory", "memory.stat")?, "total_cache")
    }

    /// Memory charged to it now, anonymous and page cache (`memory.usage_in_bytes`: the
    /// counter [`Cgroup::peak_bytes`] keeps the high watermark of), in bytes.
    pub fn usage_bytes(&self) -> Result<u64> {
        self.read("memory", "memory.usage_in_bytes")?.trim().parse().context("memory.usage_in_bytes")
    }

    /// The highest memory use since [`Cgroup::reset_peak`] (`memory.max_usage_in_bytes`:
    /// anonymous and page cache together; cgroup v1 keeps no watermark of either alone), in
    /// bytes.
    pub fn peak_bytes(&self) -> Result<u64> {
        self.read("memory", "memory.max_usage_in_bytes")?.trim().parse().context("memory.max_usage_in_bytes")
    }

    /// Starts counting the peak again (from the usage at this moment).
    pub fn reset_peak(&self) -> Result<()> {
        self.write("memory", "memory.max_usage_in_bytes", "0")
    }

    /// Reads its anonymous memory every `every` on a thread of its own until
    /// [`AnonSampler::stop`]: the highest value seen. cgroup v1 has no high watermark of
    /// anonymous memory, so this is the way to a peak of it (a spike shorter than `every`
    /// can be missed).
    pub fn sample_anon(&self, every: std::time::Duration) -> AnonSampler {
        let dir = self.dir("memory");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut highest, mut samples) = (0, 0);
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                highest = highest.max(anon_in(&dir)?);
                samples += 1;
                std::thread::sleep(every);
            }
            Ok((highest.max(anon_in(&dir)?), samples + 1))
        });
        AnonSampler { stop, thread }
    }

    /// Times the memory limit was hit (an out-of-memory kill would follow).
    pub fn oom_kills(&self) -> Result<u64> {
        let control = self.read("memory", "memory.oom_control")?;
        Ok(control.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0))
    }

    fn empty(&self, controller: &str) {
        let Ok(procs) = std::fs::read_to_string(self.dir(controller).join("cgroup.procs")) else { return };
        for pid in procs.lines() {
            let _ = std::fs::write(PathBuf::from(ROOT).join(controller).join("cgroup.procs"), pid);
        }
    }
}

/// A thread reading a cgroup's anonymous memory ([`Cgroup::sample_anon`]).
pub struct AnonSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Result<(u64, u64)>>,
}

impl AnonSampler {
    /// Stops sampling; the highest anonymous memory seen, in bytes, and how many samples
    /// were taken.
    pub fn stop(self) -> Result<(u64, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("the memory sampler panicked"))?
    }
}

fn stat_field(stat: &str, field: &str) -> Result<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("{field} in memory.stat"))
}

/// `total_rss` of the `memory.stat` in `dir`: anonymous memory, in bytes.
fn anon_in(dir: &std::path::Path) -> Result<u64> {
    let path = dir.join("memory.stat");
    stat_field(&std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?, "total_rss")
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for c in CONTROLLERS {
            self.empty(c);
            let _ = std::fs::remove_dir(self.dir(c));
        }
    }
}

/// A command for `program` that starts inside the active benchmark cgroup, if one is active.
pub fn command(program: &std::path::Path) -> std::process::Command {
    let active = ACTIVE.lock().expect("cgroup lock").clone();
    match active {
        None => std::process::Command::new(program),
        Some(name) => {
            let script = format!(
                "for c in {}; do echo $$ > {ROOT}/$c/{name}/cgroup.procs || exit 97; done; exec \"$@\"",
                CONTROLLERS.join(" ")
            );
            let mut command = std::process::Command::new("sh");
            command.arg("-c").arg(script).arg("sh").arg(program);
            command
        }
    }
}

/// Fails unless cgroups can be used, saying why.
pub fn require() -> Result<()> {
    if !Cgroup::available() {
        bail!("the benchmark suite needs root and cgroup v1 controllers (cpu, cpuacct, cpuset, memory) under {ROOT}");
    }
    Ok(())
}
