"""``python -m hpcgpu``: the same as the ``hpcgpu`` command."""

from hpcgpu.cli import main

if __name__ == "__main__":
    main()
