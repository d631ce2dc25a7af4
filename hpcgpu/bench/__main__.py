"""``python -m hpcgpu.bench ...`` is ``hpcgpu bench ...`` (handy where only a script can be run)."""

from hpcgpu.cli.bench import bench

if __name__ == "__main__":
    bench(prog_name="hpcgpu bench")
