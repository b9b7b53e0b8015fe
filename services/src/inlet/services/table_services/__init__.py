"""The table-services service: runs the table services each replicated table needs after its commits.

``actions`` says which services are due for a table and runs them through the coordinator;
``service`` follows the coordinator's commit events and runs them table by table, one instance per
table at a time (a coordinator lock lease). ``inlet table-services run`` starts it.
"""
