"""Sensors and schedules that trigger the pipeline."""
