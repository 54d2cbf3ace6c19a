"""How a trigger starts when a deployment first loads it: running where its configuration
enables it, stopped otherwise (an operator can start it in the UI)."""

import dagster as dg


def sensor_status(enabled: bool) -> dg.DefaultSensorStatus:
    """A sensor's default status for its `enabled` setting."""
    return dg.DefaultSensorStatus.RUNNING if enabled else dg.DefaultSensorStatus.STOPPED


def schedule_status(enabled: bool) -> dg.DefaultScheduleStatus:
    """A schedule's default status for its `enabled` setting."""
    return dg.DefaultScheduleStatus.RUNNING if enabled else dg.DefaultScheduleStatus.STOPPED
