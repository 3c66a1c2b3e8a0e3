from nlq2sql.cli.main import app

app()
