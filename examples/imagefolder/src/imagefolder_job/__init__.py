"""An example training job's input pipeline, measured by preflight as the job's own Dataset."""
