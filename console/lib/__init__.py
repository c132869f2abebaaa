"""What every app of the console shares, in one place (as healthchecks keeps hc/lib):

    crypto        secrets stored in the database, encrypted (Fernet)
    live          live events to browsers and agents (Channels groups), in order, off the database thread
    sockets       the browser WebSockets' close codes and the base consumer that checks login and ownership
    permissions   staff-only pages
    api_schema    the OpenAPI schema's error answers, the same for every endpoint
    api_strict    the API's refusal of queries it does not declare (repeated, empty, page < 1)
    audit         the audit log (its model is the console app's: console/models.py)
    history       the abstract status-history row that jobs and workspaces both keep
    validation    what every app says alike about a name a user gives, or a value that is no number
    fields        whole-number fields of forms and serializers that leave the bounds to the app's rules
    choices       the base of every model field's choice set: Django's TextChoices, typed as a str enum

It imports no app (jobs, workspaces, monitoring) and nothing of the project around it (settings
are read through django.conf): the apps import it, never the reverse (lint-imports keeps it so).
Its tests are in console/lib/tests/.
"""
