"""Flows: the stages chained for a user. ``compile`` (run -> IR -> Verilog), ``build`` (task ->
verified bitstream), ``evaluate`` (float and frozen returns), ``export`` (shipping a policy),
``sweep``/``sweep_spec`` (tasks x configs x seeds on Ray), ``report``/``stats`` (tables with CIs)."""
