"""What every layer uses: configuration, the one subprocess seam, log places, GPU presence."""
